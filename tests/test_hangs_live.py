"""Hangs in real multi-rank jobs: who is stalled, whom they wait for, and every rank's stacks.

The torch-free job (tests/jobs/hanging_ranks.py) steps in lockstep through a
barrier in ``backward``; the demo job runs DDP under torchrun, where the other
ranks wait in the gradient all-reduce.
"""

import asyncio
import json
import time

import pytest
from support import JOBS, run_cli, wait_for

from ranktop.tui.app import RanktopApp
from ranktop.watch.session import WatchSession, resolve
from ranktop.tui.screens.stacks import RankStackScreen, StacksScreen

HANG = JOBS / "hanging_ranks.py"


def hung_job(launch_ranks, tmp_path, job, world=4, hang_rank=2, at_step=20):
    args = ["--barrier-dir", str(tmp_path / f"{job}-barrier"), "--hang-rank", str(hang_rank), "--hang-at-step", str(at_step)]
    return launch_ranks(job, world, *args, script=HANG)


def test_watch_json_names_the_rank_the_others_wait_for(launch_ranks, tmp_path):
    hung_job(launch_ranks, tmp_path, "hang-a")
    waiting_at_the_barrier(tmp_path, "hang-a")  # (a loaded machine's ranks may take seconds to get there)
    out = run_cli("watch", "hang-a", "--json", "--duration", "5")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert [r["status"] for r in doc["ranks"]] == ["stalled"] * 4, doc["ranks"]
    assert doc["waiting_for"] == [2] and doc["stragglers"][0] == 2
    assert [r["stalled_phase"] for r in doc["ranks"]] == ["backward", "backward", "forward", "backward"]
    assert all(r["stalled_step"] == 20 and r["stalled_s"] > 2 for r in doc["ranks"])
    assert doc["diagnosis"].startswith("ranks 0-1,3 stalled in backward at step 20 for ")
    assert doc["diagnosis"].endswith("waiting for rank 2: in forward at step 20")


def waiting_at_the_barrier(tmp_path, job, world=4, hang_rank=2, at_step=20) -> None:
    """Until every rank but the hung one has reached the hang step's barrier, and is asleep in its wait (the
    wait's naps grow to 0.1 s within a second): on a loaded machine a rank may still be on its way there."""
    folder = tmp_path / f"{job}-barrier"
    others = [r for r in range(world) if r != hang_rank]
    wait_for(lambda: all((folder / f"{at_step}.{r}").exists() for r in others), 60, "the ranks never reached the hang step")
    time.sleep(1.5)


def test_ranktop_stacks_groups_the_waiting_ranks_apart_from_the_hung_one(launch_ranks, tmp_path):
    hung_job(launch_ranks, tmp_path, "hang-b")
    waiting_at_the_barrier(tmp_path, "hang-b")
    out = run_cli("stacks", "hang-b")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("job hang-b: 4 of 4 ranks answered in ")
    assert lines[1].startswith("ranks 0-1,3: time.sleep at hanging_ranks.py:") and lines[1].endswith("(backward, step 20)")
    assert lines[2].startswith("rank 2: time.sleep at hanging_ranks.py:") and lines[2].endswith("(forward, step 20)")
    assert "in all_reduce" in out.stdout and "in hang_forever" in out.stdout
    doc = json.loads(run_cli("stacks", "hang-b", "--json").stdout)
    assert [g["ranks"] for g in doc["groups"]] == [[0, 1, 3], [2]] and doc["unresponsive"] == []
    threads = {t["name"] for t in doc["ranks"]["2"]["threads"]}
    assert {"MainThread", "ranktop-probe"} <= threads  # every thread, the probe's own included


def test_a_rank_that_cannot_answer_is_listed_unresponsive_not_waited_for(launch_ranks, tmp_path):
    ranks = hung_job(launch_ranks, tmp_path, "hang-c", world=3)
    wait_for(lambda: run_cli("ping", "hang-c", "--timeout", "3").returncode == 0, 20, "the ranks never answered a ping")
    ranks.procs[1].send_signal(19)  # SIGSTOP: frozen whole, probe thread included
    try:
        out = run_cli("stacks", "hang-c", "--timeout", "5")  # the others' answers: well under a second, if quiet
    finally:
        ranks.procs[1].send_signal(18)  # SIGCONT, so the fixture can stop it
    assert out.returncode == 1
    assert "rank 1: no answer within 5s (unresponsive)" in out.stdout, out.stdout
    assert "1 of 3 rank(s) did not answer within 5s" in out.stderr, out.stderr
    assert "ranks 0,2:" in out.stdout or ("rank 0:" in out.stdout and "rank 2:" in out.stdout)


def test_the_stacks_key_on_a_hung_live_job(launch_ranks, tmp_path):
    hung_job(launch_ranks, tmp_path, "hang-d", world=3, hang_rank=0)
    session = WatchSession(resolve(["hang-d"])).start()

    async def scenario():
        app = RanktopApp(session, session.controller, refresh_hz=4)
        async with app.run_test(size=(120, 36)) as pilot:
            for _ in range(150):
                if session.snapshot().waiting_for == [0]:
                    break
                await pilot.pause(0.1)
            assert session.snapshot().waiting_for == [0]
            await pilot.press("t")
            screen = app.screen
            assert isinstance(screen, StacksScreen)
            for _ in range(100):
                if screen.settled:  # every rank's fingerprint, then each group's stacks
                    break
                await pilot.pause(0.1)
            assert [g.ranks for g in screen.report.groups] == [(1, 2), (0,)]
            await pilot.press("down", "enter")
            await pilot.pause()
            assert isinstance(app.screen, RankStackScreen)
            body = str(app.screen.query_one("#rank-stack-text").render())
            assert "in hang_forever" in body and "ranktop-probe" in body
            await pilot.press("escape", "escape", "q")

    try:
        asyncio.run(scenario())
    finally:
        session.close()


@pytest.mark.slow
def test_the_hung_demo_under_torchrun_names_rank_2_and_groups_its_stacks(torchrun):
    torchrun("ddp-hang", 3, "--hang-rank", "2", "--hang-at-step", "30")
    with WatchSession(resolve(["ddp-hang"])) as session:  # until the hang is seen (a few seconds after step 30)
        wait_for(lambda: session.snapshot().waiting_for, 60, "no rank was ever reported as waited for")
    out = run_cli("watch", "ddp-hang", "--json", "--duration", "4", timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["waiting_for"] == [2], doc["diagnosis"]
    assert [r["status"] for r in doc["ranks"]] == ["stalled"] * 3
    assert [r["stalled_phase"] for r in doc["ranks"]] == ["backward", "backward", "forward"]
    assert "waiting for rank 2: in forward at step 30" in doc["diagnosis"]
    out = run_cli("stacks", "ddp-hang", "--timeout", "10", timeout=60)
    print(out.stdout)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1].startswith("ranks 0-1: loss.backward at train.py:") and "(backward, step 30" in lines[1]
    assert lines[2].startswith("rank 2: time.sleep at faults.py:") and "(forward, step 30" in lines[2]


def test_stacks_of_an_unknown_job_is_a_one_line_error(rdv):
    out = run_cli("stacks", "no-such-job", "--timeout", "1", "--wait", "0")  # not waited for: exit 3 at once
    assert out.returncode == 3 and out.stderr.startswith("ranktop: error: unknown job 'no-such-job'")
    assert "Traceback" not in out.stderr
