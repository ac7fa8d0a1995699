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

from typing import Any, Callable


def _never() -> bool:
    return False


#: True while dynamo traces the caller (``torch.compiler.is_compiling``), once :func:`bind` has run.
is_compiling: Callable[[], bool] = _never


def bind(torch: Any) -> None:
    """Ask ``torch``'s own question from now on (idempotent)."""
    global is_compiling
    check = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    if check is None:
        check = getattr(getattr(torch, "_dynamo", None), "is_compiling", None)
    if callable(check):
        is_compiling = check
