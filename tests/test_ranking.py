"""The ranking's order, as a specification: the ranks others wait for first, then by status (worst first: silent,
stalled, slow, ok), then by score (highest first), then by rank number; ranks with no statistics yet are left out
unless silent or stalled."""

from __future__ import annotations

import numpy as np

from ranktop.watch.analysis.stragglers import ranking
from ranktop.watch.model.rank_row import RankRow
from ranktop.watch.model.rank_table import RankTable
from ranktop.watch.statuses import STATUSES


def row(rank: int, status: str, score: float, step_s: float | None = 0.1) -> RankRow:
    return RankRow(rank=rank, host="h", local_rank=0, pid=1, step=5, steps_seen=5, step_s=step_s, phases={"forward": 0.1},
                   score=score, excess_s=score * 0.1, culprit_phase=None, status=status, last_seen_s=0.0, dropped=0)  # fmt: skip


def test_waited_for_then_status_then_score_then_rank():
    rows = [
        row(0, "ok", 0.0), row(1, "ok", 0.3), row(2, "slow", 0.2), row(3, "slow", 0.9), row(4, "ok", 0.3),
        row(5, "stalled", 0.0), row(6, "silent", 0.0, step_s=None), row(7, "ok", 0.0, step_s=None), row(8, "ok", 0.5),
    ]  # fmt: skip
    table = RankTable.of_rows(rows, ["forward"])
    assert ranking(table, []) == [6, 5, 3, 2, 8, 1, 4, 0]  # 7: no statistics yet, neither silent nor stalled
    assert ranking(table, [4]) == [4, 6, 5, 3, 2, 8, 1, 0]


def test_the_order_is_a_lexicographic_sort_of_every_key_at_thousands_of_ranks():
    rng = np.random.default_rng(31)
    statuses = ["ok", "slow", "stalled", "silent"]
    rows = [row(r, statuses[rng.integers(0, 4)], float(rng.choice([0.0, 0.1, 0.2, 1.5]))) for r in range(5000)]
    waited = [17, 4001]
    table = RankTable.of_rows(rows, ["forward"])
    rank_of = {r.rank: r for r in rows}
    code = {name: i for i, name in enumerate(STATUSES)}  # worst first
    expected = sorted(rank_of, key=lambda n: (n not in waited, code[rank_of[n].status], -rank_of[n].score, n))
    assert ranking(table, waited) == expected
