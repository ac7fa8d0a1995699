"""Who is compared with whom: the parallel layout learned from a view's hellos, each rank's peer class and stage.

Learning the layout reads every rank's groups, and giving each rank its class id reads every rank: both are
worked out again only when the view says something they depend on changed (``view.groups``: some hello named
other groups; ``view.roster``: a rank came or restarted), not once a snapshot. The cache is the analysis side's
(the aggregator keeps one :class:`PeerClasses`); the job state only counts the changes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ranktop.watch.analysis import layout as layouts
from ranktop.watch.analysis.class_growth import class_keys
from ranktop.watch.engine.rank_store import JobView


@dataclass(frozen=True)
class Peers:
    """A view's ranks, in its order: their layout, coordinates, peer classes and pipeline stages."""

    layout: layouts.Layout
    coords: list[dict[str, int] | None]
    class_ids: np.ndarray | None  # int64 (None: one class)
    class_keys: np.ndarray  # int64: each rank's class named for good (class_growth.class_keys), whatever its id
    stage_ids: np.ndarray | None  # int64 pipeline stage per rank (-1: none; None: no pipeline known)


class PeerClasses:
    """The peers of the latest views, kept while the layout and the ranks stay the same (snapshots taken on two
    threads at once share it: a small lock of its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._layout: tuple[int, layouts.Layout] = (0, layouts.EMPTY)  # (view.groups it was learned at, layout)
        self._peers: tuple[layouts.Layout, int, Peers] | None = None  # (layout, view.roster, peers)

    def of(self, view: JobView) -> Peers:
        with self._lock:
            groups, layout = self._layout
            if groups != view.groups:
                ranks = view.rank.tolist()
                layout = layouts.learn({r: m.groups for r, m in zip(ranks, view.metas) if m is not None and m.groups})
                self._layout = (view.groups, layout)
            kept = self._peers
            if kept is not None and kept[0] is layout and kept[1] == view.roster:
                return kept[2]
            peers = peers_of(layout, view.rank)
            self._peers = (layout, view.roster, peers)
            return peers


def peers_of(layout: layouts.Layout, rank: np.ndarray) -> Peers:
    """Peer class and pipeline stage of each rank, as small whole numbers."""
    ranks = rank.tolist()
    n = len(ranks)
    if not layout.known:
        return Peers(layout, [None] * n, None, class_keys(None, rank), None)
    classes = layout.classes(ranks)
    class_ids = None
    if classes:
        keys: dict[tuple[object, ...], int] = {}
        class_ids = np.fromiter((keys.setdefault(classes.get(r, ()), len(keys)) for r in ranks), np.int64, n)
    stage_ids = np.fromiter((_stage(layout.stage(r)) for r in ranks), np.int64, n)
    return Peers(layout, [layout.of(r) for r in ranks], class_ids, class_keys(class_ids, rank), stage_ids)


def _stage(stage: int | None) -> int:
    return -1 if stage is None else stage
