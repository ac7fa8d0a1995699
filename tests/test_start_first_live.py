"""Monitors started before their job, as a batch script starts them: they wait, follow the job, and see it end.

Every test starts the ranktop command first, then a real job (torch-free ranks
with the real probe and relay, tests/jobs/sleepy_rank.py); a job given
``--steps`` ends by itself, each rank saying so in its last heartbeat.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import RANKTOP, run_cli, wait_for

from ranktop.watch.offline.recording import read
from ranktop.watch.session import WatchSession, resolve_waiting

pytestmark = pytest.mark.slow


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return {f.name: f for f in text_string_to_metric_families(resp.read().decode())}


def value(families: dict, name: str) -> float:
    return families[name].samples[0].value


def test_export_started_before_the_job_serves_both_ranks_then_up_0_with_the_last_values(launch_ranks, rdv):
    proc = subprocess.Popen([RANKTOP, "export", "late", "--prometheus", "0"], stderr=subprocess.PIPE, text=True)
    try:
        waiting = proc.stderr.readline()
        assert waiting == f"ranktop: waiting for job 'late' to start under {rdv} (no job is running)\n"
        serving = proc.stderr.readline()
        assert "serving job late at http://127.0.0.1:" in serving, serving
        url = serving.split(" at ", 1)[1].split()[0]
        before = scrape(url)  # served while waiting: the job is not up
        assert value(before, "ranktop_job_up") == 0 and before["ranktop_rank_step_seconds"].samples == []

        started = time.monotonic()
        launch_ranks("late", 2, "--steps", "700")  # about 10 s of steps, then a clean end
        families = wait_for(
            lambda: len((f := scrape(url))["ranktop_rank_step_seconds"].samples) == 2 and f,
            30,
            "the exporter started first never served both ranks' step times within 30 s of the job's start",
        )
        print(f"both ranks' step times served {time.monotonic() - started:.1f} s after the job started")
        assert value(families, "ranktop_job_up") == 1
        running = {s.labels["rank"]: s.value for s in families["ranktop_rank_step_seconds"].samples}

        ended = wait_for(lambda: value(f := scrape(url), "ranktop_job_up") == 0 and f, 60, "the job's end was never served")
        assert value(ended, "ranktop_job_ended_timestamp_seconds") <= time.time()
        last = {s.labels["rank"]: s.value for s in ended["ranktop_rank_step_seconds"].samples}
        assert sorted(last) == ["0", "1"] and all(0.5 * running[r] < last[r] < 2 * running[r] for r in last)
        assert proc.poll() is None  # still serving, until stopped
    finally:
        proc.terminate()  # SIGTERM: how a batch script stops its sidecar
        assert proc.wait(10) in (0, 130)


def test_record_started_first_records_the_job_and_exits_0_when_it_ends(launch_ranks, tmp_path, rdv):
    path = tmp_path / "first.rec"
    proc = subprocess.Popen([RANKTOP, "record", "rec-first", str(path)], stderr=subprocess.PIPE, text=True)
    first = proc.stderr.readline()  # the recorder is up and waiting before the job exists
    assert proc.poll() is None
    launch_ranks("rec-first", 2, "--steps", "300")
    out, err = proc.communicate(timeout=90)
    err = first + err
    assert proc.returncode == 0, err
    lines = err.splitlines()
    assert lines[0] == f"ranktop: waiting for job 'rec-first' to start under {rdv} (no job is running)"
    assert "ranktop: job rec-first ended: every rank exited cleanly" in lines
    recording = read(path)
    assert recording.entries and not recording.torn  # closed whole
    replayed = json.loads(run_cli("replay", str(path), "--json").stdout)
    assert [r["rank"] for r in replayed["ranks"]] == [0, 1] and replayed["state"] == "ended"
    report = json.loads(run_cli("report", str(path), "--json").stdout)
    assert report["ended_at"] is not None and report["restarts"] == 0


def test_watch_json_started_first_waits_once_lists_the_jobs_there_are_and_says_ended(launch_ranks, tmp_path, rdv):
    launch_ranks("other", 1)  # a job that does run: the waiting line names it, so a typo shows
    proc = subprocess.Popen(
        [RANKTOP, "watch", "wj", "--json", "--duration", "60", "--wait", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    first = proc.stderr.readline()  # waiting before the job exists
    launch_ranks("wj", 2, "--steps", "300")
    out, err = proc.communicate(timeout=90)
    err = first + err
    assert proc.returncode == 0, err
    assert err.splitlines()[0] == f"ranktop: waiting for job 'wj' to start under {rdv} (running jobs: other) for up to 60s"
    assert err.count("waiting for job") == 1
    doc = json.loads(out)
    assert doc["state"] == "ended" and doc["ended_at"] <= time.time() and [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert doc["restarts"] == 0 and doc["failed_ranks"] == []


def test_the_tui_started_first_shows_its_waiting_screen_then_the_job(launch_ranks, rdv):
    from ranktop.tui.app import RanktopApp
    from ranktop.tui.panes.waiting import Waiting

    session = WatchSession(resolve_waiting(["tui-first"], follow=True)).start()

    async def scenario():
        app = RanktopApp(session, session.controller, refresh_hz=5)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause(0.5)
            text = str(app.query_one(Waiting).render())
            assert f"job 'tui-first' has not started under {rdv} (no job is running)" in text, text
            launch_ranks("tui-first", 2)
            for _ in range(300):
                if len(app.snapshot.ranks) == 2 and all(r.steps_seen for r in app.snapshot.ranks):
                    break
                await pilot.pause(0.1)
            assert len(app.snapshot.ranks) == 2 and not app.query_one(Waiting).display
            await pilot.press("q")

    try:
        asyncio.run(scenario())
    finally:
        session.close()


def test_ping_and_stacks_started_first_answer_once_the_job_comes(launch_ranks, rdv):
    ping = subprocess.Popen(
        [RANKTOP, "ping", "pinged", "--wait", "60", "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    stacks = subprocess.Popen(
        [RANKTOP, "stacks", "pinged", "--wait", "60", "--timeout", "20"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    waited = {proc: proc.stderr.readline() for proc in (ping, stacks)}  # both waiting before the job exists
    assert ping.poll() is None and stacks.poll() is None
    launch_ranks("pinged", 2)
    out, err = ping.communicate(timeout=90)
    err = waited[ping] + err
    assert ping.returncode == 0, err
    assert err == f"ranktop: waiting for job 'pinged' to start under {rdv} (no job is running) for up to 60s\n"
    assert [line.split(":")[0] for line in out.splitlines()] == ["rank 0", "rank 1"] and "pong" in out
    out, err = stacks.communicate(timeout=90)
    err = waited[stacks] + err
    assert stacks.returncode == 0, err
    assert out.startswith("job pinged: 2 of 2 ranks answered")
