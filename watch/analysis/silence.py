"""Which ranks are silent: they stopped talking, or the relay they were heard through is gone.

Not when this viewer is behind on the job's messages: a viewer behind on one relay is behind on them all (it
serves them in turn), so the time it is behind is added to the silence allowed; nor while a relay is still
being connected. Worked out from a gathered view (watch/engine/rank_store.py), with no lock held.
"""

from __future__ import annotations

import numpy as np

from ranktop.watch.engine.rank_store import JobView


def silent_ranks(view: JobView) -> np.ndarray:
    """bool per rank of the view: silent."""
    relays = view.relays
    urls = view.relay_urls
    n = len(urls)
    settling, down, dropped = np.zeros(n, bool), np.zeros(n, bool), np.full(n, -np.inf)
    if relays.settling or relays.links:  # (a relay being connected, or one that dropped: else none to look up)
        for i, url in enumerate(urls):
            settling[i] = url in relays.settling
            link = relays.links.get(url) if url is not None else None
            if link is not None:
                down[i], dropped[i] = bool(link[0]), _or_inf(link[1])
    eid = view.relay
    quiet = (view.now - view.last_seen > view.silent_after_s + relays.behind_s) & ~settling[eid]
    return quiet | down[eid] | (view.last_seen <= dropped[eid])


def _or_inf(value: float | None) -> float:
    return float("-inf") if value is None else value
