"""The one question every hook of the probe asks first: is torch.compile tracing this call?

Hooks and wrappers of the probe sit on paths a compiled region also runs: global
module hooks, hooks on a module that is compiled, ``torch.distributed``
functions called from compiled code. Dynamo traces whatever Python it reaches
there, and a single untraceable call (``threading.get_ident``, ``time.perf_counter``,
a lock) is a graph break, or a crash under ``fullgraph=True``. So each of them
begins with ``if dynamo_guard.is_compiling(): <what the code would do without
us>``. Dynamo folds ``torch.compiler.is_compiling()`` to ``True`` while it
traces, so the traced path is exactly the script's own: no graph break, no
extra guard, no recompile, the same numerics. Eagerly it costs about 70 ns.

The question is bound once torch is in the process (:func:`bind`); until then,
and on a torch too old to ask it, the answer is no. This module never imports
torch itself (the probe imports it only after the script has).
"""

from __future__ import annotations

import sys
from typing import Any, Callable


def _never() -> bool:
    return False


#: True while dynamo traces the caller, or torch compiles or exports (``torch.compiler.is_compiling``), once
#: :func:`bind` has run. For wrappers that touch tensors or devices (the collectives, device waits).
is_compiling: Callable[[], bool] = _never

#: True while dynamo traces the caller (``torch.compiler.is_dynamo_compiling``: one frame that returns False,
#: half the cost of :data:`is_compiling`). For automatic mode's hooks, which only read clocks: in the eager code
#: that runs while torch compiles or exports (AOTAutograd calling a graph module, a non-strict export of the
#: model) they would time a call and do no harm.
is_tracing: Callable[[], bool] = _never


def bind(torch: Any) -> None:
    """Ask ``torch``'s own questions from now on (idempotent)."""
    global is_compiling, is_tracing
    compiler = getattr(torch, "compiler", None)
    check = getattr(compiler, "is_compiling", None)
    if check is None:
        check = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    if callable(check):
        is_compiling = is_tracing = check
    tracing = getattr(compiler, "is_dynamo_compiling", None)
    if callable(tracing):
        is_tracing = tracing


# -- frames of ours that dynamo must never compile as frames of their own ----------------------------------
#
# Inside a compiled region's extent, dynamo also intercepts every Python frame
# that eager code starts (after a graph break, or under torch's own skipped
# functions). torch's ``Tensor.backward`` calling ``torch.autograd.backward``
# is such a case: torch's function is on dynamo's skip list, our wrapper of it
# is not, so dynamo would try to compile our wrapper, meet the skipped original
# and count a graph break that the job without ranktop does not have. Each
# hook and wrapper of ours is therefore registered here, and once dynamo is
# loaded its code is marked "skip this frame, not what it calls" (dynamo's own
# ``skip_code``), which is what torch's skip list does for torch's functions.
# When dynamo traces *into* our code from a compiled frame, that mark does not
# apply and :func:`is_compiling` does the work.

_codes: dict[Any, bool] = {}  # code -> whether the frames it starts are skipped too
_skip: Callable[[Any, bool], None] | None = None


def keep_out(*functions: Any, recursive: bool = False) -> None:
    """Never let dynamo compile a frame of these functions as its own. ``recursive``: nor any frame they start
    (for code of ours all the way down; a wrapper that calls the script's code, or torch's, leaves that to dynamo)."""
    for fn in functions:
        code = getattr(getattr(fn, "__func__", fn), "__code__", None)
        if code is not None and code not in _codes:
            _codes[code] = recursive
            if _skip is not None:
                _skip(code, recursive)


def settle() -> None:
    """Dynamo may be loaded now (``torch.compile`` was called): mark every registered frame (idempotent)."""
    global _skip
    if _skip is not None:
        return
    skip = _skipper()
    if skip is None:
        return
    try:
        for code, recursive in _codes.items():
            skip(code, recursive)
    except Exception:
        return  # a torch whose internals moved: is_compiling() still keeps the traced path clean
    _skip = skip


def _skipper() -> Callable[[Any, bool], None] | None:
    """Dynamo's own way to mark a code object (``skip_code``; for a whole call tree, SKIP for its callees too)."""
    eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    skip_code = getattr(eval_frame, "skip_code", None)
    if skip_code is None:
        return None
    types = sys.modules.get("torch._dynamo.types")
    set_strategy = getattr(eval_frame, "set_code_exec_strategy", None)
    action = getattr(types, "FrameAction", None)
    strategy = getattr(types, "FrameExecStrategy", None)

    def skip(code: Any, recursive: bool) -> None:
        if recursive and set_strategy is not None and action is not None and strategy is not None:
            set_strategy(code, strategy(action.SKIP, action.SKIP))
        else:
            skip_code(code)

    return skip
