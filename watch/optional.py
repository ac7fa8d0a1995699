"""The engine's optional dependencies (pyproject's extras), imported only by the feature that needs them.

prometheus_client (``ranktop[export]``, watch/offline/prometheus.py) and plotly
(``ranktop[report]``, watch/offline/report_html.py) are imported when their feature is
used, never by the rest of the engine; when one is missing, that feature fails
with one line naming the extra that brings it, the same way for both.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ranktop.watch.errors import RanktopError


class MissingDependency(RanktopError):
    """An optional dependency is not installed; the message says how to get it."""


def require(module: str, feature: str, extra: str) -> ModuleType:
    """``module`` imported, or :class:`MissingDependency`: "FEATURE needs PACKAGE: pip install 'ranktop[EXTRA]'"."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(f"{feature} needs {module.partition('.')[0]}: pip install 'ranktop[{extra}]'") from None
