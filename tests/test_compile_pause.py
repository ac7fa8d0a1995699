"""torch.compile's recompilations told as what they are: the phase ``compile`` (probe/compile_phase.py), a pause
like a checkpoint's (watch/analysis/pauses.py): the rank compiling and the ranks waiting for it are never stalled,
and a job stuck after the compilation still is, one stall limit later. Synthetic messages through a real
Aggregator, as tests/test_pauses.py; the live job is in tests/test_compile_pause_live.py, the probe's side in
tests/test_compile_phase.py."""

from ranktop.watch.aggregator import Aggregator
from ranktop.watch.model.json_doc import document
from ranktop.watch.model.verdict import verdict
from messages import Clock

from test_pauses import hold, train


def test_ranks_waiting_for_a_recompilation_under_way_are_waiting_not_stalled():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 40)
    hold(agg, clock, 6, {2: (40, 39, "compile"), **{r: (40, 39, "backward") for r in (0, 1, 3)}})
    snap = agg.snapshot()
    assert {r.status for r in snap.ranks} == {"ok"} and snap.diagnosis is None
    answer = verdict(snap)
    assert answer.kind == "compile" and answer.ranks == [2] and answer.phase == "compile", answer
    assert answer.text == "rank 2 compiling (torch.compile) for 6s, the others wait", answer.text
    doc = document(snap)
    assert doc["verdict"]["kind"] == "compile" and doc["pauses"][0]["kind"] == "compile" and doc["pauses"][0]["holding"] is True


def test_a_recompilation_just_ended_holds_no_stall_before_its_step_is_heard_but_a_job_stuck_after_it_is_stalled():
    """A recompilation comes first in its step: when it ends, every rank has been stuck as long as it took and the
    step's records are still to come. For one stall limit (2 s here) after the state last said ``compile``, in that
    same step, nobody is stalled; past it, a job still stuck is."""
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 40)
    compiling = {2: (40, 39, "compile"), **{r: (40, 39, "backward") for r in (0, 1, 3)}}
    hold(agg, clock, 4, compiling)  # 4 s of compiling: past the 2 s limit
    after = {2: (40, 39, "forward"), **{r: (40, 39, "backward") for r in (0, 1, 3)}}
    hold(agg, clock, 1, after, since=4)  # compiled, its forward goes on: 1 s since its state said compile
    snap = agg.snapshot()
    assert {r.status for r in snap.ranks} == {"ok"} and verdict(snap).kind != "stalled", verdict(snap).text
    hold(agg, clock, 3, after, since=5)  # 4 s since: stuck after it, past the limit
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["stalled"] * 4 and verdict(snap).kind == "stalled", verdict(snap).text


def test_a_compile_in_an_earlier_step_holds_off_no_stall_in_a_later_one():
    clock = Clock()
    agg = Aggregator("j", clock=clock)
    train(agg, clock, 4, 40)
    hold(agg, clock, 1, {r: (40, 39, "compile" if r == 2 else "backward") for r in range(4)})
    train(agg, clock, 4, 5, first=40)  # its step ended, and four more
    hold(agg, clock, 4, {r: (45, 44, "backward") for r in range(4)})  # stuck in step 45: its compile was in step 40
    snap = agg.snapshot()
    assert [r.status for r in snap.ranks] == ["stalled"] * 4, [r.status for r in snap.ranks]


def test_recompilations_that_cost_the_job_5_percent_are_told_as_compilation():
    clock = Clock()
    agg = Aggregator("j", clock=clock, window=64)
    train(agg, clock, 4, 80, saver=1, every=8, save_s=0.4, phase="compile")
    snap = agg.snapshot()
    assert {r.status for r in snap.ranks} == {"ok"}, [(r.rank, r.status, r.culprit_phase) for r in snap.ranks]
    answer = verdict(snap)
    assert answer.kind == "compile" and answer.ranks == [1] and answer.every == 8, answer
    assert answer.text.startswith("rank 1 compiling (torch.compile): 0.40 s every 8 steps, the job spends "), answer.text
    assert answer.text.endswith("of its time in compilation"), answer.text
