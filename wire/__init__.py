"""What both ends of the wire agree on: message schema, command signing, rendezvous, captures.

``ranktop.probe`` (inside training) and ``ranktop.watch`` (the viewer's engine) both import
this package and nothing of each other.
"""

from .messages import PROTOCOL_VERSION
from .names import OTHER_PHASE, STANDARD_PHASES
from .schema import VersionMismatch, WireError

__version__ = "0.1.0"

__all__ = ["PROTOCOL_VERSION", "STANDARD_PHASES", "OTHER_PHASE", "WireError", "VersionMismatch", "__version__"]
