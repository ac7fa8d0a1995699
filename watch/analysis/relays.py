"""Which relays a snapshot calls waiting, connected or lost, from what the engine knows of them
(watch/engine/endpoints.py :class:`~ranktop.watch.engine.endpoints.RelayFacts`): a relay never heard is waiting;
one heard is lost once quiet past the silence limit (what makes a rank silent) or when its connection dropped (a
relay killed: lost now, not after the limit), else connected. Whole-array operations: a job of 2,048 nodes is a
few numpy calls.
"""

from __future__ import annotations

import numpy as np

from ranktop.watch.engine.endpoints import RelayFacts
from ranktop.watch.model.endpoint import EndpointRows
from ranktop.watch.statuses import CONNECTED, ENDPOINT_STATES, LOST, WAITING

_LOST, _WAITING, _CONNECTED = (ENDPOINT_STATES.index(s) for s in (LOST, WAITING, CONNECTED))


def endpoint_rows(facts: RelayFacts, lost_after_s: float) -> EndpointRows:
    """The snapshot's relay rows: each waiting (never heard), connected, or lost (quiet past ``lost_after_s``, or its
    connection dropped)."""
    lost = (facts.quiet > lost_after_s) | facts.down
    states = np.where(facts.heard, np.where(lost, _LOST, _CONNECTED), _WAITING).astype(np.int8)
    return EndpointRows(facts.urls, facts.hosts, states, facts.quiet, facts.ranks)
