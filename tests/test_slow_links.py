"""The slow link: which node's network holds the job back, from the links its relays measured and what the job waits.

Pure logic first (watch/analysis/slow_links.py on hand-made links), then the
whole engine on the simulator's job (its relays' ``links`` messages and its
ranks' steps through a real Aggregator), then the verdict and the JSON.
"""

from __future__ import annotations

import random
import tempfile

import numpy as np
import pytest

from ranktop.demo.simulate import Scenario, Simulator
from ranktop.watch.aggregator import Aggregator
from ranktop.watch.analysis import slow_links
from ranktop.watch.engine import link_book
from ranktop.watch.engine.link_book import FORGET_S, LinkBook, LinkColumns
from ranktop.watch.model.json_doc import document
from ranktop.watch.model.snapshot import Link
from ranktop.watch.model.verdict import HEALTHY, SLOW_LINK, SLOW_RANK, verdict
from ranktop.wire import schema
from ranktop.wire.messages import LinkRate, Links

FAST = 1.6e9  # what a healthy link reads (the probes' ceiling)
HOSTS = ("node-a", "node-b", "node-c", "node-d")


def mesh(hosts=HOSTS, slow: dict[tuple[str, str], float] | None = None, seed: int = 0, probes: int = 8) -> LinkColumns:
    """Every link of ``hosts`` at a healthy rate less up to 10% noise, those of ``slow`` at the rate given."""
    rnd = random.Random(seed)
    slow = slow or {}
    return LinkColumns.of([Link(a, b, slow.get((a, b), FAST * (1 - 0.1 * rnd.random())), 2e-4, probes)
                           for a in hosts for b in hosts if a != b])  # fmt: skip


def out_of(host: str, rate: float, hosts=HOSTS) -> dict[tuple[str, str], float]:
    return {(host, b): rate for b in hosts if b != host}


def into(host: str, rate: float, hosts=HOSTS) -> dict[tuple[str, str], float]:
    return {(a, host): rate for a in hosts if a != host}


# -- the rule ----------------------------------------------------------------------------------------------


def test_a_node_whose_links_out_are_slow_is_named_with_what_it_costs():
    found = slow_links.find(mesh(slow=out_of("node-c", 3e6)), comm_s=0.25, median_step_s=0.28)
    assert len(found) == 1
    item = found[0]
    assert (item.host, item.hosts, item.direction) == ("node-c", ["node-c"], "out")
    assert item.rate_bps == pytest.approx(3e6)
    assert FAST * 0.9 <= item.expected_bps <= FAST
    # at the expected rate its transfer would take 3e6 / expected of what it takes: the rest is lost
    assert item.excess_s == pytest.approx(0.25 * (1 - 3e6 / item.expected_bps))
    assert item.loss == pytest.approx(item.excess_s / 0.28)
    assert item.text.startswith("node-c's network is slow: its links out at 3.00 MB/s against 1.")
    assert item.text.endswith(f"elsewhere, the job loses {round(item.loss * 100)}%")


def test_a_cap_on_the_way_in_names_the_node_too():
    found = slow_links.find(mesh(slow=into("node-b", 2e6)), comm_s=0.1, median_step_s=0.2)
    assert [(f.host, f.direction) for f in found] == [("node-b", "in")]


def test_a_healthy_mesh_names_nothing_however_much_the_job_waits():
    for seed in range(20):
        assert slow_links.find(mesh(seed=seed), comm_s=0.5, median_step_s=0.6) == []


def test_one_noisy_link_one_way_is_no_slow_node_nor_a_slow_pair():
    """A busy machine can make one measurement look slow: a node is judged on the median of its links, a pair on
    both ways."""
    assert slow_links.find(mesh(slow={("node-c", "node-a"): 30e6}), comm_s=0.5, median_step_s=0.6) == []


def test_a_pair_slow_both_ways_is_named_as_the_pair():
    slow = {("node-a", "node-b"): 4e6, ("node-b", "node-a"): 5e6}
    (item,) = slow_links.find(mesh(slow=slow), comm_s=0.2, median_step_s=0.25)
    assert item.host is None and item.hosts == ["node-a", "node-b"]
    assert item.rate_bps == 5e6  # the faster way: both ways at most this
    assert item.text.startswith("the link node-a–node-b is slow: it at 5.00 MB/s")


def test_a_slow_link_the_job_hardly_waits_on_costs_under_5_percent_and_is_not_named():
    assert slow_links.find(mesh(slow=out_of("node-c", 3e6)), comm_s=0.004, median_step_s=0.1) == []
    assert slow_links.find(mesh(slow=out_of("node-c", 3e6)), comm_s=None, median_step_s=0.1) == []


def test_a_node_whose_ranks_are_slow_by_their_own_work_is_not_named_as_a_link():
    """A busy node answers its probes late too: its own work explains the waits."""
    links = mesh(slow=out_of("node-c", 3e6) | into("node-c", 3e6))
    assert slow_links.find(links, comm_s=0.2, median_step_s=0.3, busy_hosts={"node-c"}) == []
    assert [f.host for f in slow_links.find(links, comm_s=0.2, median_step_s=0.3)] == ["node-c"]


def test_a_node_whose_own_probes_to_itself_are_as_slow_is_busy_not_on_a_slow_link():
    """On a machine whose cores are oversubscribed, moving 32 KiB through the relays' threads takes time of its own:
    a link is slow only well beyond what the node's probes to itself take."""
    links = mesh(slow=out_of("node-b", 20e6))
    busy = LinkColumns(links.hosts, links.src, links.dst, links.rate, links.rtt, links.probes,
                       own=np.array([FAST, 30e6, FAST, FAST]))  # fmt: skip
    assert slow_links.find(busy, comm_s=0.02, median_step_s=0.05) == []
    quiet = LinkColumns(links.hosts, links.src, links.dst, links.rate, links.rtt, links.probes, own=np.full(4, FAST))
    assert [f.host for f in slow_links.find(quiet, comm_s=0.02, median_step_s=0.05)] == ["node-b"]


def test_a_link_a_busy_machine_could_read_slow_is_no_slow_link():
    """A crossing of under a millisecond (32 KiB at 33 MB/s and faster) is within what scheduling adds on a busy
    machine: such a link is not told apart from a healthy one, however fast the others read."""
    assert slow_links.find(mesh(slow=out_of("node-c", 90e6)), comm_s=0.25, median_step_s=0.28) == []
    assert [f.host for f in slow_links.find(mesh(slow=out_of("node-c", 30e6)), comm_s=0.25, median_step_s=0.28)] == ["node-c"]


def test_two_nodes_have_nothing_to_hold_their_link_against():
    hosts = ("node-a", "node-b")
    assert slow_links.find(mesh(hosts, slow=out_of("node-b", 1e6, hosts)), comm_s=0.3, median_step_s=0.4) == []


def test_links_resting_on_too_few_probes_do_not_count():
    assert slow_links.find(mesh(slow=out_of("node-c", 3e6), probes=2), comm_s=0.25, median_step_s=0.28) == []


def test_two_slow_nodes_are_both_listed_the_costliest_first():
    hosts = HOSTS + ("node-e", "node-f")
    found = slow_links.find(mesh(hosts, slow=out_of("node-a", 8e6, hosts) | out_of("node-d", 2e6, hosts)), comm_s=0.3, median_step_s=0.4)
    assert [f.host for f in found] == ["node-d", "node-a"]


def test_one_slow_node_among_2048_probing_64_peers_each_is_found():
    rnd = np.random.default_rng(1)
    n, peers = 2048, 64
    src = np.repeat(np.arange(n), peers)
    dst = (src + np.tile(np.arange(1, peers + 1), n)) % n
    rate = FAST * (1 - 0.1 * rnd.random(len(src)))
    rate[(src == 777) | (dst == 777)] = 5e6
    columns = LinkColumns([f"n{i:04d}" for i in range(n)], src, dst, rate, np.full(len(src), 2e-4), np.full(len(src), 8))
    found = slow_links.find(columns, comm_s=0.05, median_step_s=0.2)
    assert [(f.host, f.direction) for f in found] == [("n0777", "both")]
    assert len(slow_links.shown(columns, found)) == 2 * peers  # past 32 nodes the snapshot carries the slow one's links


# -- the link book -----------------------------------------------------------------------------------------


def test_the_book_keeps_each_relays_latest_word_and_forgets_a_relay_gone_quiet():
    book = LinkBook()
    book.take(Links(job="j", host="a", ts=0.0, links=[LinkRate(peer="b", rate=1e6, rtt=1e-3, probes=8)]), now=0.0)
    book.take(Links(job="j", host="a", ts=1.0, links=[LinkRate(peer="b", rate=2e6, rtt=1e-3, probes=8)]), now=1.0)
    book.take(Links(job="j", host="b", ts=1.0, links=[LinkRate(peer="a", rate=3e6, rtt=1e-3, probes=8)]), now=1.0)
    assert [(link.src, link.dst, link.rate_bps) for link in book.columns(2.0).rows()] == [("a", "b", 2e6), ("b", "a", 3e6)]
    book.take(Links(job="j", host="b", ts=9.0, links=[LinkRate(peer="a", rate=3e6, rtt=1e-3, probes=8)]), now=9.0)
    assert [(link.src, link.dst) for link in book.columns(12.0).rows()] == [("b", "a")]


def said(host: str, peers: dict[str, float], probes: int = 8) -> Links:
    """A relay's ``links`` message: its rate to each of ``peers`` (itself among them: its probes to itself)."""
    return Links(job="j", host=host, ts=0.0, links=[LinkRate(peer=p, rate=r, rtt=1e-3, probes=probes) for p, r in peers.items()])


def test_the_books_columns_are_the_latest_word_of_every_relay_heard_lately_however_their_peers_change():
    """What the book hands the judge, against the messages themselves: random relays, saying random peers (and
    themselves), some going quiet, taken in turn."""
    rnd = random.Random(3)
    book, latest = LinkBook(), {}
    names = [f"n{i}" for i in range(12)]
    for tick in range(300):
        now = tick * 0.5
        host = rnd.choice(names[:9])
        peers = {p: rnd.uniform(1e6, 1e9) for p in rnd.sample(names, rnd.randint(0, 5))}
        book.take(said(host, peers), now)
        latest[host] = (now, peers)
        if tick % 7 == 0:
            heard = {h: peers for h, (at, peers) in latest.items() if now - at <= FORGET_S}
            columns = book.columns(now)
            assert sorted((link.src, link.dst, link.rate_bps) for link in columns.rows()) == sorted(
                (h, p, r) for h, peers in heard.items() for p, r in peers.items() if p != h
            )
            own = {h: peers[h] for h, peers in heard.items() if h in peers}
            assert {h: columns.own[i] for i, h in enumerate(columns.hosts) if not np.isnan(columns.own[i])} == own
            assert set(columns.hosts) == set(heard) | {p for peers in heard.values() for p in peers}


def test_a_relay_naming_new_peers_in_every_message_cannot_grow_the_book():
    """Nothing from the network is trusted: the book's table of host names holds the names its relays' latest
    words name, and slots given back are used again."""
    book = LinkBook()
    for i in range(5000):
        book.take(said("a", {f"made-up-{i}-{k}": 1e6 for k in range(4)}), now=i * 0.01)
        book.take(said("b", {"a": 1e6}), now=i * 0.01)
    assert book.names_held <= 2 + 2 * 4  # a, b, a's 4 peers (and those of the message before, let go of after)
    assert sorted(book.columns(50.0).hosts) == ["a", "b"] + sorted(f"made-up-4999-{k}" for k in range(4))


def test_past_its_bounds_the_book_refuses_a_relays_word_and_keeps_what_it_had(monkeypatch):
    monkeypatch.setattr(link_book, "MAX_HOSTS", 4)
    monkeypatch.setattr(link_book, "MAX_BOOK_LINKS", 6)
    book = LinkBook()
    book.take(said("a", {"b": 1e6, "c": 2e6}), now=0.0)
    book.take(said("b", {"a": 1e6, "x": 1e6, "y": 1e6}), now=0.0)  # a 5th and 6th name
    book.take(said("c", {"a": 1e6, "b": 1e6, "c": 1e6, "d": 1e6, "e": 1e6}), now=0.0)  # 7 links in the book
    assert book.refused == 2
    book.take(said("b", {"a": 3e6, "c": 1e6}), now=1.0)
    assert [(link.src, link.dst, link.rate_bps) for link in book.columns(1.0).rows()] == [
        ("a", "b", 1e6),
        ("a", "c", 2e6),
        ("b", "a", 3e6),
        ("b", "c", 1e6),
    ]


def test_the_medians_worked_out_are_those_of_every_node_that_could_be_slow():
    """find() works out a node's medians only where half its links are under the bar (a median under it needs
    that): the nodes it leaves out could not be slow, the ones it keeps have their exact medians, whether a few
    (one by one) or many (one sort)."""
    rnd = np.random.default_rng(5)
    for n, slow_share in ((200, 0.02), (200, 0.6), (40, 0.3)):
        group = rnd.integers(0, n, 4000)
        values = np.where(rnd.random(4000) < slow_share, 1e6, 1e9) * rnd.uniform(0.5, 1.5, 4000)
        ceiling = rnd.choice([3e6, 3e9], n)
        exact = slow_links._medians(group, values, n)
        some = slow_links._medians_under(group, values, ceiling, n)
        could_be_slow = exact * slow_links.SLOW_FACTOR <= ceiling
        assert could_be_slow.any()
        assert np.array_equal(some[could_be_slow], exact[could_be_slow])
        worked = ~np.isnan(some)
        assert np.array_equal(some[worked], exact[worked])


def test_a_links_message_crosses_the_wire_and_what_breaks_its_bounds_does_not():
    msg = Links(job="j", host="a", ts=1.0, links=[LinkRate(peer="b", rate=1e6, rtt=1e-3, probes=8)], cost=68000.0)
    assert schema.decode(schema.encode(msg)) == msg
    for bad in (LinkRate(peer="b", rate=-1.0, rtt=1e-3, probes=8), LinkRate(peer="b", rate=1e6, rtt=1e-3, probes=0)):
        with pytest.raises(schema.WireError):
            schema.decode(schema.encode(Links(job="j", host="a", ts=1.0, links=[bad])))


# -- the whole engine, on the simulator's job --------------------------------------------------------------


def watched(scenario: Scenario, seconds: float = 20.0):
    """The snapshot of the simulated job through a real Aggregator, on the simulator's clock: its ranks' steps and
    its relays' links."""
    sim = Simulator(scenario, tempfile.mkdtemp())
    clock = [1.0e9]
    agg = Aggregator(scenario.job, clock=lambda: clock[0], wall_clock=lambda: clock[0])
    agg.ingest_batch([(frames, None) for frames in sim.hellos(clock[0])])
    for now, frames in sim.replay(seconds, start=clock[0]):
        clock[0] = now
        agg.ingest_batch([(f, None) for f in frames])
    return agg.snapshot()


def test_a_simulated_slow_link_is_the_verdict_and_no_rank_is_slow_for_it():
    snapshot = watched(Scenario(job="j", ranks=32, nodes=4, slow_link="sim0002"))
    answer = verdict(snapshot)
    assert answer.kind == SLOW_LINK and answer.host == "sim0002" and answer.ranks == []
    assert answer.loss >= 0.05 and answer.text.startswith("sim0002's network is slow: its links at ")
    assert not any(row.status == "slow" for row in snapshot.ranks)
    doc = document(snapshot)
    assert doc["verdict"]["kind"] == "slow_link" and doc["verdict"]["hosts"] is None
    assert [s["host"] for s in doc["slow_links"]] == ["sim0002"]
    hosts = [f"sim{i:04d}" for i in range(4)]
    assert {(link["src"], link["dst"]) for link in doc["links"]} == {(a, b) for a in hosts for b in hosts if a != b}


def test_the_same_simulated_job_with_no_slow_link_is_healthy_and_names_none():
    snapshot = watched(Scenario(job="j", ranks=32, nodes=4))
    assert verdict(snapshot).kind == HEALTHY
    assert snapshot.slow_links == [] and len(snapshot.links) == 12


def test_a_simulated_slow_rank_is_a_slow_rank_not_a_link():
    snapshot = watched(Scenario(job="j", ranks=32, nodes=4, slow_rank=9, slow_ms=20.0))
    assert verdict(snapshot).kind == SLOW_RANK and snapshot.slow_links == []


def test_a_slow_link_and_a_slow_rank_elsewhere_the_costlier_is_the_verdict():
    cheap_rank = watched(Scenario(job="j", ranks=32, nodes=4, slow_link="sim0002", slow_rank=9, slow_ms=4.0))
    assert verdict(cheap_rank).kind == SLOW_LINK
    dear_rank = watched(Scenario(job="j", ranks=32, nodes=4, slow_link="sim0002", slow_rank=9, slow_ms=250.0))
    answer = verdict(dear_rank)
    assert [s.host for s in dear_rank.slow_links] == ["sim0002"]  # (the rank's lateness is not counted as the link's)
    assert answer.kind == SLOW_RANK and answer.ranks[0] == 9 and answer.loss > dear_rank.slow_links[0].loss
