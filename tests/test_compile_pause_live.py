"""Recompilations on a real torchrun/gloo job started as a user starts it (``ranktop launch``, no ranktop in the
script: tests/jobs/recompiling_ranks.py): rank 1's torch.compile'd model recompiles for 3 s now and then while
rank 0 waits for it in the gradients' all-reduce. The probe times it as the phase ``compile``
(probe/compile_phase.py) and the viewer reads a rank compiling and one waiting, never a stall."""

from __future__ import annotations

import pytest

from test_pauses_live import launch, stalls, statuses, watched  # noqa: F401 (the fixture)

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


def test_a_recompilation_that_outlasts_the_stall_limit_is_compiling_not_a_stall(launch):  # noqa: F811
    # 3 s of compiling every 40 steps of about 25 ms: rank 0 waits in all_reduce past the stall limit (2 s)
    launch("recompiles", "--recompile-every", "40", "--compile-s", "3", script="recompiling_ranks.py")
    seen = watched("recompiles", 16)
    kinds = [answer.kind for answer, _ in seen]
    assert "stalled" not in kinds and not any("stalled" in statuses(snap) for _, snap in seen), stalls(seen)
    # the rank's state names the phase while it compiles: the viewer's pause under way is rank 1's
    under_way = [p for _, snap in seen for p in snap.pauses if p.kind == "compile" and p.under_way_s is not None]
    assert under_way and all(p.ranks == [1] for p in under_way), kinds
    holding = [answer for answer, _ in seen if answer.kind == "compile" and "the others wait" in answer.text]
    assert holding and all(a.ranks == [1] for a in holding), kinds
    assert holding[0].text.startswith("rank 1 compiling (torch.compile) for "), holding[0].text
