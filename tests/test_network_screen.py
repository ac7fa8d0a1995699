"""The network screen (``n``) and the slow link's verdict line: the answer first, then the links, at 80x24 too.

Snapshots come from the simulator's job through a real Aggregator
(tests/test_slow_links.py ``watched``); the App runs headless.
"""

from __future__ import annotations

from test_app_render import drive, text_of
from test_slow_links import watched

from ranktop.demo.simulate import Scenario
from ranktop.tui.panes.verdict import VerdictLine
from ranktop.tui.screens.network import NetworkScreen, network_text
from ranktop.watch.model.verdict import brief, verdict


def test_the_screen_says_the_slow_node_first_then_every_link_node_by_node():
    snapshot = watched(Scenario(job="j", ranks=32, nodes=4, slow_link="sim0002"), 15.0)
    lines = network_text(snapshot, 74, 20).plain.splitlines()
    assert lines[0].startswith("sim0002's network") and " MB/s vs 1." in lines[0] and "job loses" in lines[0]  # (brief)
    header = next(i for i, line in enumerate(lines) if line.startswith("from \\ to"))
    assert lines[header].split()[-4:] == ["1", "2", "3", "4"]
    rows = lines[header + 1 : header + 5]
    assert [row.split()[1] for row in rows] == ["sim0000", "sim0001", "sim0002", "sim0003"]
    assert all(cell.endswith("M") for cell in rows[2].split()[2:])  # sim0002's links out: slow, in MB/s
    # the others' links: slow into sim0002 only (the diagonal is blank: a row's cells are its 3 peers, in order)
    into_slow = {"sim0000": 1, "sim0001": 1, "sim0003": 2}
    for row in rows:
        cells = row.split()[2:]
        if row.split()[1] in into_slow:
            assert [c.endswith("M") for c in cells] == [i == into_slow[row.split()[1]] for i in range(3)], row
    assert all(len(line) <= 74 for line in lines)


def test_a_job_of_many_nodes_gets_a_line_per_node_the_slow_one_first():
    snapshot = watched(Scenario(job="j", ranks=96, nodes=24, slow_link="sim0011"), 12.0)
    lines = network_text(snapshot, 74, 20).plain.splitlines()
    assert lines[1].split()[:3] == ["node", "out", "in"]
    assert lines[2].startswith("sim0011 ")
    assert len(lines) <= 20 and "more nodes" in lines[-2]


def test_a_healthy_job_says_no_link_is_slow_and_one_node_says_none_is_measured():
    assert network_text(watched(Scenario(job="j", ranks=16, nodes=4), 8.0), 74, 20).plain.startswith("no slow link: 4 nodes")
    assert network_text(watched(Scenario(job="j", ranks=8, nodes=1), 5.0), 74, 20).plain.startswith("no link measured")


def test_at_80x24_the_verdict_line_names_the_slow_link_and_n_opens_the_network_screen():
    snapshot = watched(Scenario(job="j", ranks=32, nodes=4, slow_link="sim0002"), 15.0)
    assert len(brief(verdict(snapshot), 78)) <= 78

    async def scenario(app, pilot):
        line = text_of(app.query_one(VerdictLine))
        assert "sim0002's network" in line and "job loses" in line
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, NetworkScreen)
        body = text_of(app.screen.query_one("#network-text"))
        assert body.splitlines()[0].startswith("sim0002's network") and "job loses" in body.splitlines()[0]
        assert "from \\ to" in body and "sim0003" in body  # the node x node table fits under it
        await pilot.press("escape")
        assert not isinstance(app.screen, NetworkScreen)

    drive(snapshot, scenario, size=(80, 24))
