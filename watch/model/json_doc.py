"""The ``--json`` document: a snapshot and its verdict, as ``ranktop watch --json`` prints it (docs/json-schema.md).

It sits above both: the verdict is a function of a snapshot, and the document is the snapshot with its
verdict, so the JSON schema and the TUI render the same objects and can never disagree.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from ranktop.watch.model.endpoint import EndpointRows
from ranktop.watch.model.rank_table import RankRows
from ranktop.watch.model.snapshot import Snapshot
from ranktop.watch.model.verdict import verdict


def document(snapshot: Snapshot) -> dict[str, Any]:
    """The ``--json`` document of one snapshot."""
    out = asdict(
        replace(snapshot, ranks=RankRows.of([]), endpoints=EndpointRows.of([]))
    )  # the rows one by one: they are built as they are read
    out["ranks"] = [asdict(row) for row in snapshot.ranks]
    out["endpoints"] = [asdict(e) for e in snapshot.endpoints]
    for request in out["requests"]:
        request["answered_ranks"] = sorted(request["answered_ranks"])
    out["connected"] = snapshot.connected
    out["silent"] = snapshot.silent
    out["clock"] = snapshot.clock
    out["verdict"] = asdict(verdict(snapshot))
    out["verdict"]["clock"] = snapshot.clock  # the clock its figures (excess, loss) are on
    return out
