"""The relays a viewer knows, as a snapshot reads them (watch/engine/endpoints.py): columns, rows made when read."""

from ranktop.watch.analysis.relays import endpoint_rows
from ranktop.watch.engine.endpoints import SETTLING_S, Endpoints
from ranktop.watch.model.endpoint import Endpoint, EndpointRows
from ranktop.watch.statuses import CONNECTED, LOST, WAITING


def relays(count: int) -> Endpoints:
    known = Endpoints()
    for i in range(count):
        known.add(f"tcp://node-{i}:1", f"node-{i}", now=0.0)
    return known


def test_each_relay_is_waiting_then_connected_then_lost_when_quiet_or_dropped_in_the_order_it_came():
    known = relays(4)
    for i in (0, 1, 2):
        known.heard(f"tcp://node-{i}:1", now=1.0, age=0.01)
    known.heard("tcp://node-0:1", now=9.0, age=0.01)
    known.note_link("tcp://node-2:1", up=False, now=9.5)
    rows = endpoint_rows(known.facts(10.0, {"tcp://node-1:1": (8, 9)}), lost_after_s=5.0)
    assert list(rows) == [
        Endpoint("tcp://node-0:1", "node-0", CONNECTED, 1.0),
        Endpoint("tcp://node-1:1", "node-1", LOST, 9.0, (8, 9)),  # quiet past lost_after_s: it took its ranks
        Endpoint("tcp://node-2:1", "node-2", LOST, 9.0),  # its connection dropped
        Endpoint("tcp://node-3:1", "node-3", WAITING, 10.0),  # never heard: quiet since it was found
    ]
    assert rows[1] == list(rows)[1] and rows[1:3] == list(rows)[1:3] and len(rows) == 4


def test_a_snapshot_s_relays_are_grouped_by_state_and_counted_without_a_row_each():
    known = relays(2048)
    for i in range(2046):
        known.heard(f"tcp://node-{i}:1", now=1.0, age=0.01)
    known.note_link("tcp://node-7:1", up=False, now=1.5)
    groups = endpoint_rows(known.facts(2.0, {}), lost_after_s=5.0).by_state()
    assert {state: len(rows) for state, rows in groups.items()} == {LOST: 1, WAITING: 2, CONNECTED: 2045}
    assert [e.url for e in groups[WAITING]] == ["tcp://node-2046:1", "tcp://node-2047:1"]
    assert groups[LOST][0].url == "tcp://node-7:1" and groups[CONNECTED][0].url == "tcp://node-0:1"
    by_hand = EndpointRows.of(list(endpoint_rows(known.facts(2.0, {}), lost_after_s=5.0))).by_state()  # rows made by hand group alike
    assert {state: list(rows) for state, rows in by_hand.items()} == {state: list(rows) for state, rows in groups.items()}


def test_a_replaced_relay_leaves_its_place_and_the_new_one_starts_cut_off_until_heard():
    known = relays(3)
    for i in range(3):
        known.heard(f"tcp://node-{i}:1", now=1.0, age=0.01)
    known.replace("tcp://node-1:1", "tcp://node-1:2", "node-1", now=2.0)
    assert known.urls() == ["tcp://node-0:1", "tcp://node-2:1", "tcp://node-1:2"]
    view = known.view(2.5)
    assert view.links == {"tcp://node-1:2": (False, 2.0)}
    assert view.cut_off("tcp://node-1:2", last_seen=1.0) and not view.cut_off("tcp://node-0:1", last_seen=1.0)
    rows = endpoint_rows(known.facts(2.5, {}), lost_after_s=5.0)
    assert [(e.url, e.state) for e in rows] == [("tcp://node-0:1", CONNECTED), ("tcp://node-2:1", CONNECTED), ("tcp://node-1:2", WAITING)]
    assert known.host_of("tcp://node-2:1") == "node-2" and known.host_of("tcp://node-1:1") is None


def test_a_viewer_is_behind_by_how_much_later_than_usual_messages_come_and_settled_once_every_relay_spoke():
    known = relays(2)
    known.heard("tcp://node-0:1", now=1.0, age=0.2)  # a clock skew of 0.2 s is no lateness
    assert known.view(1.0).settling == {"tcp://node-0:1"} and not known.view(1.0).settled
    known.heard("tcp://node-0:1", now=2.0, age=1.7)
    known.heard("tcp://node-1:1", now=2.0, age=0.1)
    view = known.view(2.0)
    assert view.behind_s == 1.5 and view.settled
    assert known.view(1.0 + SETTLING_S + 1).settling == frozenset()
    assert relays(1).view(SETTLING_S).settled  # a relay never heard, found long enough ago: a dead one
