"""What a rank or an endpoint can be, worst first: the names every screen and the verdict sort by."""

from __future__ import annotations

# Rank statuses, worst first (the order used when sorting by status).
SILENT = "silent"  # no message for a while: dead, hung hard, or cut off
STALLED = "stalled"  # talking, but no step finished for much longer than usual: hung
SLOW = "slow"  # persistently slower than the median rank
OK = "ok"
STATUSES = (SILENT, STALLED, SLOW, OK)

# Endpoint (relay) states.
WAITING = "waiting"  # nothing heard from it yet
CONNECTED = "connected"
LOST = "lost"  # quiet after talking: its node's ranks went with it
ENDPOINT_STATES = (LOST, WAITING, CONNECTED)  # worst first
