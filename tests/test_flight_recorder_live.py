"""The flight recorder on live jobs: record a real job, replay it to the same figures, report it, export it.

The 2-rank job is the demo under torchrun (DDP, gloo); the exporter's job is
torch-free ranks with the real probe (tests/jobs/sleepy_rank.py). Prometheus is
scraped by a real HTTP client and read back by prometheus_client's own parser.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support import RANKTOP, run_cli, wait_for

from ranktop.watch.offline.recording import FlightRecorder, read
from ranktop.watch.offline.replay import snapshot_at
from ranktop.watch.session import WatchSession, resolve

pytestmark = pytest.mark.slow

FIGURES = ("rank", "host", "local_rank", "step", "steps_seen", "step_s", "phases", "culprit_phase", "status", "collective_s")
#: The size told of a slow rank is its excess averaged over the snapshots the viewer took while it was slow
#: (watch/analysis/stragglers.py ExcessHistory.size): a replay seen at one instant took none of the live ones.
SIZES = ("excess_s", "score")


def test_a_recording_of_a_live_2_rank_job_replays_to_the_same_snapshot(torchrun, tmp_path):
    torchrun("rec-2", 2, "--slow-rank", "1", "--slow-ms", "30")
    recorder = FlightRecorder(tmp_path / "live.rec", job="rec-2")
    session = WatchSession(resolve(["rec-2"]), recorder=recorder).start()
    try:
        wait_for(lambda: (s := session.snapshot()).ranks and all(r.step_s for r in s.ranks), 30, "no step times")
        time.sleep(6)
    finally:
        session.close()  # the receiver stops first: the live aggregator has heard exactly what was recorded
    live = session.aggregator.snapshot()
    replayed = snapshot_at(read(tmp_path / "live.rec"), float("inf"))
    assert recorder.stats.dropped == 0 and recorder.stats.frames > 20
    assert (replayed.job, replayed.world_size, replayed.global_step, replayed.stragglers) == (
        live.job,
        live.world_size,
        live.global_step,
        live.stragglers,
    )
    assert [r.rank for r in live.ranks] == [0, 1] and live.ranks[1].status == "slow"
    for a, b in zip(live.ranks, replayed.ranks):
        assert {f: getattr(a, f) for f in FIGURES} == {f: getattr(b, f) for f in FIGURES}
        assert {f: getattr(a, f) for f in SIZES} == pytest.approx({f: getattr(b, f) for f in SIZES}, rel=0.1, abs=1e-3)
        assert abs(a.last_seen_s - b.last_seen_s) < 1.0
    assert [(c.rank, c.op, c.calls, c.bytes) for c in live.collectives] == [(c.rank, c.op, c.calls, c.bytes) for c in replayed.collectives]


def test_ranktop_record_then_report_names_the_slow_rank_for_the_whole_run(torchrun, tmp_path):
    torchrun("rec-cli", 2, "--slow-rank", "1", "--slow-ms", "40")
    out = run_cli("record", "rec-cli", str(tmp_path / "run.rec"), "--duration", "12", timeout=60)
    assert out.returncode == 0, out.stderr
    assert "recorded" in out.stderr and "2 rank(s)" in out.stderr

    report = run_cli("report", str(tmp_path / "run.rec"), "--json")
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    assert doc["job"] == "rec-cli" and doc["ranks"] == 2
    episodes = [e for e in doc["stragglers"] if e["who"] == "rank 1"]
    assert len(episodes) == 1 and episodes[0]["phase"] == "data"
    assert episodes[0]["share_of_run"] > 0.6 and episodes[0]["cost_s"] > 0  # slow from its first window to the end
    assert not [e for e in doc["stragglers"] if e["who"] != "rank 1"]
    text = run_cli("report", str(tmp_path / "run.rec")).stdout
    assert "rank 1 slow in data" in text
    assert doc["clock"] == "host" and "times: CPU wall time" in text  # the clock its figures are on

    at = run_cli("replay", str(tmp_path / "run.rec"), "--json", "--at", "-1")
    assert at.returncode == 0, at.stderr
    assert json.loads(at.stdout)["stragglers"][0] == 1


def test_prometheus_scrape_of_a_live_job_lists_every_rank(launch_ranks, tmp_path):
    launch_ranks("prom", 3, "--slow-rank", "2", "--slow-ms", "15")
    proc = subprocess.Popen([RANKTOP, "export", "prom", "--prometheus", "0", "--duration", "60"], stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        assert "http://127.0.0.1:" in line, line  # loopback unless told otherwise
        url = line.split(" at ", 1)[1].split()[0]

        def scrape():
            with urllib.request.urlopen(url, timeout=5) as resp:
                assert resp.status == 200
                return {f.name: f for f in text_string_to_metric_families(resp.read().decode())}

        def ready():
            fams = scrape()
            steps = fams["ranktop_rank_step_seconds"].samples
            return fams if len(steps) == 3 and all(s.labels["local_rank"] != "-1" for s in steps) else None  # hellos heard

        families = wait_for(ready, 30, "the exporter never listed 3 ranks' step times")
        steps = families["ranktop_rank_step_seconds"].samples
        assert sorted(s.labels["rank"] for s in steps) == ["0", "1", "2"]
        assert all(s.labels["job"] == "prom" and s.labels["host"] and s.labels["local_rank"] == s.labels["rank"] for s in steps)
        assert all(0.010 < s.value < 0.100 for s in steps)
        phases = {(s.labels["rank"], s.labels["phase"]) for s in families["ranktop_rank_phase_seconds"].samples}
        assert {(str(r), p) for r in range(3) for p in ("data", "forward", "backward", "optimizer")} <= phases
        status = {s.labels["rank"]: s.labels["status"] for s in families["ranktop_rank_status"].samples if s.value == 1}
        assert status == {"0": "ok", "1": "ok", "2": "slow"}
        for name in ("ranktop_rank_straggler_score_ratio", "ranktop_rank_last_step", "ranktop_rank_memory_rss_bytes"):
            assert sorted(s.labels["rank"] for s in families[name].samples) == ["0", "1", "2"], name
        job = {
            name: families[name].samples[0].value
            for name in (
                "ranktop_job_ranks_connected",
                "ranktop_job_slow_ranks",
                "ranktop_job_stalled_ranks",
                "ranktop_job_steps_per_second",
            )
        }
        assert job["ranktop_job_ranks_connected"] == 3 and job["ranktop_job_slow_ranks"] == 1 and job["ranktop_job_stalled_ranks"] == 0
        assert job["ranktop_job_steps_per_second"] > 5
    finally:
        proc.terminate()
        proc.wait(10)


def test_export_without_a_port_is_a_one_line_error(rdv):
    out = run_cli("export", "nojob", "--prometheus", "not-a-port")
    assert out.returncode == 2 and "expected [HOST:]PORT" in out.stderr and "Traceback" not in out.stderr


def test_the_report_of_a_recorded_hang_names_whom_the_ranks_waited_for(launch_ranks, tmp_path):
    # 4 lockstep ranks (tests/jobs/hanging_ranks.py); rank 2 hangs in forward at step 60, the others wait in backward
    from support import JOBS

    args = ["--barrier-dir", str(tmp_path / "barrier"), "--hang-rank", "2", "--hang-at-step", "60"]
    launch_ranks("hang-rec", 4, *args, script=JOBS / "hanging_ranks.py")
    out = run_cli("record", "hang-rec", str(tmp_path / "hang.rec"), "--duration", "25", timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(run_cli("report", str(tmp_path / "hang.rec"), "--json").stdout)
    (hang,) = doc["hangs"]
    assert sorted(hang["ranks"]) == [0, 1, 2, 3] and hang["waiting_for"] == [2] and hang["step"] == 60
    assert hang["duration_s"] > 5 and "waiting for rank 2" in hang["diagnosis"]
    text = run_cli("report", str(tmp_path / "hang.rec")).stdout
    assert "rank(s) 0, 1, 2, 3 stalled at step 60" in text and "waiting for rank(s) 2" in text
    assert "no step finished" in text


def test_watch_json_with_record_writes_a_recording_that_replays(launch_ranks, tmp_path):
    launch_ranks("watch-rec", 2)
    out = run_cli("watch", "watch-rec", "--json", "--duration", "4", "--record", str(tmp_path / "w.rec"))
    assert out.returncode == 0, out.stderr
    live = json.loads(out.stdout)
    replayed = json.loads(run_cli("replay", str(tmp_path / "w.rec"), "--json").stdout)
    assert replayed["job"] == live["job"] == "watch-rec"
    assert [r["rank"] for r in replayed["ranks"]] == [0, 1] and all(r["steps_seen"] > 10 for r in replayed["ranks"])
    assert abs(replayed["global_step"] - live["global_step"]) <= 20  # frames heard while the session closed are recorded too
