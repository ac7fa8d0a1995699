"""What both ends of the wire agree on: message schema, command signing, rendezvous, captures.

``ranktop.probe`` (inside training) and ``ranktop.watch`` (the viewer's engine) both import
this package and nothing of each other.
"""

from .schema import OTHER_PHASE, PROTOCOL_VERSION, STANDARD_PHASES, VersionMismatch, WireError

__version__ = "0.1.0"

__all__ = ["PROTOCOL_VERSION", "STANDARD_PHASES", "OTHER_PHASE", "WireError", "VersionMismatch", "__version__"]
