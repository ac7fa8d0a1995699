"""The exporter against a real Prometheus server (Debian's ``prometheus``, installed by ``make test`` as root).

A Prometheus scrapes ``ranktop export`` (started before the job, as a batch
script would) on a live 2-rank job, and the test reads the per-rank step time,
the straggler score and the verdict back through Prometheus' HTTP query API,
the way a dashboard or an alert does. The shipped alert rules are loaded into
that server and must evaluate; every query of the shipped Grafana dashboard
must run. Where ``prometheus``/``promtool`` are missing the tests skip, saying how to install them.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from support import RANKTOP, wait_for

DOCS = Path(__file__).resolve().parents[1] / "docs"
ALERTS = DOCS / "prometheus" / "alerts.yml"
DASHBOARD = DOCS / "grafana" / "ranktop.json"
INSTALL = "apt-get install prometheus (make test installs it when run as root)"


def tool(name: str) -> str:
    path = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
    if path is None:
        pytest.skip(f"{name} is not installed: {INSTALL}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_shipped_alert_rules_pass_promtool():
    out = subprocess.run([tool("promtool"), "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 5 rules found" in out.stdout


def query(base: str, promql: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as resp:
        doc = json.load(resp)
    assert doc["status"] == "success", doc
    return doc["data"]["result"]


@pytest.mark.slow
def test_prometheus_scrapes_the_exporter_of_a_live_2_rank_job(launch_ranks, tmp_path, rdv):
    prometheus = tool("prometheus")
    export_port, prom_port = free_port(), free_port()
    export = subprocess.Popen([RANKTOP, "export", "scraped", "--prometheus", f"127.0.0.1:{export_port}"], stderr=subprocess.PIPE, text=True)
    config = tmp_path / "prometheus.yml"
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files: [alerts.yml]\n"
        "scrape_configs:\n  - job_name: ranktop\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{export_port}']\n"
    )
    server = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "prometheus.log", "wb"),
    )
    base = f"http://127.0.0.1:{prom_port}"
    try:
        assert "waiting for job 'scraped'" in export.stderr.readline()
        assert f"127.0.0.1:{export_port}/metrics" in export.stderr.readline()

        def ready():
            try:
                return query(base, "up")
            except OSError:
                return None

        wait_for(ready, 60, "prometheus never answered: " + (tmp_path / "prometheus.log").read_text()[-2000:])
        # before the job: the target is up, the job is not
        wait_for(lambda: query(base, 'ranktop_job_up{job="scraped"} == 0'), 30, "prometheus never scraped ranktop_job_up 0")

        launch_ranks("scraped", 2, "--slow-rank", "1", "--slow-ms", "20")

        def both():
            r = query(base, 'ranktop_rank_step_seconds{job="scraped"}')
            return len(r) == 2 and all(s["metric"]["local_rank"] != "-1" for s in r) and r  # their hellos heard too

        steps = wait_for(both, 60, "prometheus never held both ranks' step times")
        by_rank = {s["metric"]["rank"]: float(s["value"][1]) for s in steps}
        assert 0.010 < by_rank["0"] < by_rank["1"] < 0.200, by_rank  # rank 1 sleeps 20 ms more per step
        assert all(s["metric"]["host"] and s["metric"]["local_rank"] == s["metric"]["rank"] for s in steps)

        scores = wait_for(
            lambda: (r := query(base, 'ranktop_rank_straggler_score_ratio{job="scraped"} > 0.2')) and r,
            60,
            "prometheus never held rank 1's straggler score",
        )
        assert [s["metric"]["rank"] for s in scores] == ["1"]
        verdict = wait_for(lambda: query(base, 'ranktop_job_verdict{job="scraped"} == 1'), 30, "no verdict in prometheus")
        assert [v["metric"]["kind"] for v in verdict] == ["slow_rank"]
        (top,) = query(base, 'ranktop_job_top_straggler_excess_seconds{job="scraped"}')
        # (two ranks, no roles: the median is their midpoint, so rank 1's excess over it is half its 20 ms)
        assert top["metric"]["rank"] == "1" and top["metric"]["phase"] == "forward" and 0.005 < float(top["value"][1]) < 0.050
        assert query(base, 'ranktop_rank_status{job="scraped", rank="1", status="slow"} == 1')

        with urllib.request.urlopen(f"{base}/api/v1/rules", timeout=5) as resp:
            groups = json.load(resp)["data"]["groups"]
        rules = {r["name"]: r for g in groups for r in g["rules"]}
        assert len(rules) == 5 and all(r["health"] == "ok" for r in rules.values()), rules
        assert rules["RanktopRankSlow"]["state"] == "pending"  # slow, not yet for 5 minutes

        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel["targets"]:
                promql = target["expr"].replace("$job", "scraped")
                assert query(base, promql) is not None, (panel["title"], promql)
        assert query(base, 'ranktop_job_up{job="scraped"} == 1')
    finally:
        server.terminate()
        export.terminate()
        server.wait(20)
        export.wait(10)
