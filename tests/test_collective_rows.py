"""Which ranks get collective rows of their own under the job's (watch/analysis/collectives.py ranks_that_matter), and what
the pane says about them: the ranks that matter, never "the top stragglers" of a job where only one is slow."""

import dataclasses

from test_app_render import drive, job_snapshot, rank_row
from test_collectives_panel import stat

from ranktop.tui.panes import CollectiveTable
from ranktop.tui.panes.collectives import shown_stats, title
from ranktop.watch.analysis.collectives import ranks_that_matter, rows_shown
from ranktop.watch.model.snapshot import LEAST_WAIT, MOST_WAIT, WAITED_FOR
from ranktop.watch.model.rank_table import RankTable
from ranktop.watch.statuses import SILENT, SLOW, STALLED


def job(n: int = 64, waits=None, **changed):
    """``n`` healthy ranks whose collective wait is ``waits(rank)`` ms; ``changed``: rank -> fields to replace."""
    waits = waits or (lambda r: 40.0 + (r * 7) % 5)
    rows = [dataclasses.replace(rank_row(r), collective_s=waits(r) / 1000) for r in range(n)]
    for r, fields in changed.items():
        rows[int(r[1:])] = dataclasses.replace(rows[int(r[1:])], **fields)
    return rows


def table_of(rows):
    return RankTable.of_rows(rows, ["data", "forward", "backward", "optimizer", "other"])


def test_a_healthy_job_shows_only_the_ranks_that_wait_most_and_least():
    rows = job(waits=lambda r: {17: 90.0, 40: 3.0}.get(r, 40.0))
    assert ranks_that_matter(table_of(rows), [], 8) == [(17, MOST_WAIT), (40, LEAST_WAIT)]


def test_flagged_ranks_come_first_by_score_then_the_extremes_of_wait():
    rows = job(r9=dict(status=SLOW, score=0.3), r30=dict(status=SLOW, score=0.6), r5=dict(status=SILENT),
               r2=dict(collective_s=0.001), r60=dict(collective_s=0.2))  # fmt: skip
    assert ranks_that_matter(table_of(rows), [], 8) == [(30, SLOW), (9, SLOW), (5, SILENT), (60, MOST_WAIT), (2, LEAST_WAIT)]


def test_the_rank_the_others_wait_for_comes_before_everything():
    rows = job(**{f"r{r}": dict(status=STALLED) for r in range(64) if r != 2})
    matter = ranks_that_matter(table_of(rows), [2], 4)
    assert matter[0] == (2, WAITED_FOR) and len(matter) == 4 and all(why == STALLED for _, why in matter[1:])


def test_the_limit_keeps_the_extremes():
    rows = job(**{f"r{r}": dict(status=SLOW, score=r / 100) for r in range(10, 20)})
    matter = ranks_that_matter(table_of(rows), [], 4)
    assert [why for _, why in matter] == [SLOW, SLOW, MOST_WAIT, LEAST_WAIT] and matter[0] == (19, SLOW)


def test_no_collective_yet_no_rank():
    rows = [rank_row(r) for r in range(64)]
    assert ranks_that_matter(table_of(rows), [], 8) == []


def test_a_big_job_s_pane_lists_the_slow_rank_and_the_extremes_and_its_title_says_why():
    rows = job(r9=dict(status=SLOW, score=0.3), r2=dict(collective_s=0.001), r60=dict(collective_s=0.2))
    snap = job_snapshot(rows, stragglers=[9, 33, 34, 35, 36], collectives=[stat(-1)] + [stat(n) for n in range(64)])
    shown = shown_stats(snap)
    assert [(s.rank, why) for s, why in shown] == [(-1, ""), (9, SLOW), (60, MOST_WAIT), (2, LEAST_WAIT)]
    assert title(snap, shown).endswith("per rank: 9 slow, 60 most wait, 2 least wait")

    async def scenario(app, pilot):
        table = app.query_one(CollectiveTable)
        assert [row.key.value for row in table.ordered_rows] == [
            "-1:ddp_allreduce",
            "9:ddp_allreduce",
            "60:ddp_allreduce",
            "2:ddp_allreduce",
        ]
        assert table.get_row("9:ddp_allreduce")[-1].plain == "slow"

    drive(snap, scenario, size=(200, 50))


def test_a_big_healthy_job_s_pane_says_no_rank_is_flagged():
    rows = job(r2=dict(collective_s=0.001), r60=dict(collective_s=0.2))
    snap = job_snapshot(rows, collectives=[stat(-1)] + [stat(n) for n in range(64)])
    assert "no rank flagged; per rank: 60 most wait, 2 least wait" in title(snap, shown_stats(snap))
    bare = job_snapshot([rank_row(r) for r in range(64)], collectives=[stat(-1)])
    assert "job rows only: no rank has collectives of its own yet" in title(bare, shown_stats(bare))


def test_rows_the_engine_chose_a_moment_ago_stay_with_a_reason_though_the_extremes_moved():
    """A big job's rows are worked out every few seconds; the healthy rank that waits the most changes with the noise."""
    rows = job(r9=dict(status=SLOW, score=0.3), r2=dict(collective_s=0.001), r60=dict(collective_s=0.2),
               r11=dict(collective_s=0.05), r12=dict(collective_s=0.035))  # fmt: skip
    snap = job_snapshot(rows, collectives=[stat(-1), stat(9), stat(11), stat(12)])  # chosen when 11 and 12 were the extremes
    shown = shown_stats(snap)
    assert [(s.rank, why) for s, why in shown] == [(-1, ""), (9, SLOW), (11, MOST_WAIT), (12, LEAST_WAIT)]


def test_the_engine_keeps_rows_of_the_ranks_that_matter_in_a_big_job():
    from screen_jobs import simulated_job

    snap = simulated_job()
    ranks = {c.rank for c in snap.collectives if c.rank >= 0}
    assert 3071 in ranks and len(ranks) == 3  # the slow rank, and the healthy ranks that wait most and least
    assert ranks == {n for n, _ in ranks_that_matter(snap.ranks.table, snap.waiting_for, 8)}


def test_a_small_job_s_title_names_the_ranks_that_stand_out_most_telling_first():
    rows = job(4, waits=lambda r: {0: 3.0, 1: 90.0}.get(r, 40.0), r2=dict(status=SLOW, score=0.48))
    snap = job_snapshot(rows, collectives=[stat(-1)] + [stat(n) for n in range(4)])
    shown = shown_stats(snap)
    assert [s.rank for s, _ in shown] == [-1, 0, 1, 2, 3]  # every rank of a small job has its rows
    assert title(snap, shown).endswith(" · rank 2 slow · rank 1 most wait · rank 0 least wait")


def test_the_judge_hands_the_pane_its_rows_chosen_ordered_and_said_why():
    """The pane renders what the snapshot carries (watch/analysis/collectives.py rows_shown, run by the judge):
    choosing again on the judge's own rows changes nothing, and every row shown has its why."""
    from screen_jobs import simulated_job

    snap = simulated_job()
    assert rows_shown(snap.collectives, snap.ranks.table, snap.waiting_for) == snap.collectives
    mine = [(s.rank, s.why) for s in snap.collectives if s.rank >= 0]
    assert mine and all(why for _, why in mine) and mine[0] == (3071, SLOW)
    assert [(s.rank, why) for s, why in shown_stats(snap)] == [(s.rank, s.why) for s in snap.collectives]


def test_a_job_of_64_ranks_keeps_every_rank_s_rows_those_not_shown_said_so():
    """Up to 64 ranks every rank's rows are gathered (watch/aggregator.py) and the --json document keeps them; the
    pane shows those of the ranks that matter, the others' why is None."""
    rows = job(r9=dict(status=SLOW, score=0.3), r2=dict(collective_s=0.001), r60=dict(collective_s=0.2))
    stats = [stat(-1)] + [stat(n) for n in range(64)]
    out = rows_shown(stats, table_of(rows), [])
    assert len(out) == 65 and {s.rank for s in out} == {s.rank for s in stats}
    assert [(s.rank, s.why) for s in out[:4]] == [(-1, ""), (9, SLOW), (60, MOST_WAIT), (2, LEAST_WAIT)]
    assert all(s.why is None for s in out[4:])
