"""The parallel layout from the hellos' groups, peer-class scoring and the pipeline's stages: pure logic."""

from __future__ import annotations

import msgspec
import pytest

from ranktop.probe.process_groups import state_layout
from ranktop.watch.analysis import stragglers
from ranktop.watch.analysis.layout import learn
from ranktop.wire import parallel_groups, schema
from ranktop.wire.names import HELLO
from ranktop.wire.messages import Group

import messages
import rank_stats


def mesh_groups(world: int, dims: list[tuple[str, int]]) -> dict[int, list[dict]]:
    """What each rank's hello says on an init_device_mesh job of these (name, size) dimensions."""
    out = {}
    for rank in range(world):
        out[rank] = []
        for entry in state_layout(",".join(f"{n}={s}" for n, s in dims), rank, world):
            entry = dict(entry, desc="mesh_" + entry["role"], role="")  # as DeviceMesh describes its groups
            out[rank].append(entry)
    return out


def typed(groups_of: dict) -> dict:
    """Each rank's groups (written as plain maps) as a decoded hello holds them (wire/messages.py's Group)."""
    return {rank: msgspec.convert(groups, list[Group]) for rank, groups in groups_of.items()}


def stats(step: float, **phases: float) -> rank_stats.RankStats:
    return rank_stats.RankStats(step, dict(phases), 1 / step, phases.get("comm"))


def test_roles_come_from_mesh_and_megatron_descriptions():
    assert parallel_groups.role_of("mesh_tp") == "tp"
    assert parallel_groups.role_of("mesh_dp_shard") == "dp_shard"
    assert parallel_groups.role_of("TENSOR_MODEL_PARALLEL_GROUP") == "tp"
    assert parallel_groups.role_of("PIPELINE_MODEL_PARALLEL_GROUP") == "pp"
    assert parallel_groups.role_of("mesh_dim_0") == "" and parallel_groups.role_of("") == ""


def test_a_3d_mesh_gives_each_rank_its_coordinates_and_pipeline_peers():
    layout = learn(typed(mesh_groups(16, [("pp", 2), ("tp", 2), ("dp", 4)])))
    assert layout.roles == ("pp", "tp", "dp")
    assert layout.of(13) == {"pp": 1, "tp": 1, "dp": 1}  # 13 = 1*8 + 1*4 + 1
    assert layout.text(13) == "pp 1, tp 1, dp 1"
    classes = layout.classes(range(16))
    assert {r for r in range(16) if classes[r] == classes[13]} == set(range(8, 16))


def test_a_group_used_for_send_and_recv_is_the_pipeline_and_unnamed_chains_are_stages():
    named_by_use = {r: [{"id": str(r % 2), "desc": "", "size": 2, "ranks": [r % 2, r % 2 + 2], "p2p": True}] for r in range(4)}
    layout = learn(typed(named_by_use))
    assert [layout.stage(r) for r in range(4)] == [0, 0, 1, 1]
    # point-to-point on the default group: each rank lists its peers; a chain 0-1-2-3 and one 4-5-6-7
    peers = {r: [{"id": "p2p:x", "desc": "p2p peers", "size": 2, "ranks": sorted({r, r + 1 if r % 4 < 3 else r - 1}), "p2p": True}]
             for r in range(8)}  # fmt: skip
    layout = learn(typed(peers))
    assert [layout.stage(r) for r in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert layout.classes([0, 4])[0] == layout.classes([0, 4])[4]


def test_without_a_pipeline_every_rank_is_one_class():
    layout = learn(typed(mesh_groups(4, [("dp", 2), ("tp", 2)])))
    assert layout.known and layout.classes(range(4)) is None


def test_peer_classes_compare_a_rank_with_its_own_stage_only():
    # stage 1 does twice stage 0's work by design; rank 3 is 20 ms slower than its peer rank 2
    live = {0: stats(0.2, forward=0.02, comm=0.15), 1: stats(0.2, forward=0.02, comm=0.15),
            2: stats(0.2, forward=0.04, comm=0.13), 3: stats(0.2, forward=0.06, comm=0.11)}  # fmt: skip
    names = ["forward", "comm", "other"]
    everyone = rank_stats.score(live, names)
    assert everyone.of(2)[0] > 0.005  # compared with everyone, the heavier stage's healthy rank looks slow
    layout = learn(typed(mesh_groups(4, [("pp", 2), ("dp", 2)])))
    peers = rank_stats.score(live, names, layout.classes(live))
    assert peers.of(3) == (pytest.approx(0.02), "forward")
    assert [peers.of(r)[0] for r in (0, 1, 2)] == [0.0, 0.0, 0.0]


def test_unbalanced_stages_are_a_finding_of_their_own():
    live = {0: stats(0.2, forward=0.05, comm=0.15), 1: stats(0.2, forward=0.1, comm=0.1)}
    rows = rank_stats.stages(live, {0: 0, 1: 1}.get)
    assert [(s.stage, s.work_s) for s in rows] == [(0, pytest.approx(0.05)), (1, pytest.approx(0.1))]
    assert stragglers.imbalance(rows, 0.2) == "stage 1 does 2.0x the work of stage 0: the pipeline idles 62% of each step"
    even = rank_stats.stages({0: stats(0.2, comm=0.1), 1: stats(0.2, comm=0.1)}, {0: 0, 1: 1}.get)
    assert stragglers.imbalance(even, 0.2) is None


def test_a_stated_layout_lays_ranks_out_as_init_device_mesh_does():
    groups = {g["role"]: parallel_groups.members(msgspec.convert(g, Group)) for g in state_layout("pp=2,tp=2,dp=-1", 13, 16)}
    assert groups == {"pp": [5, 13], "tp": [9, 13], "dp": [12, 13, 14, 15]}
    with pytest.raises(ValueError, match="does not divide"):
        state_layout("pp=3,dp=-1", 0, 16)
    with pytest.raises(ValueError, match="role=size"):
        state_layout("pipes=2", 0, 16)


def _hello(groups) -> dict:
    return {"job": "j", "rank": 0, "ts": 1.0, "host": "h", "world": 4, "local_rank": 0, "pid": 1, "groups": groups}


def test_the_wire_checks_the_groups_of_a_hello():
    good = state_layout("pp=2,dp=2", 0, 4)
    schema.decode(messages.raw(HELLO, _hello(good)))
    for bad in ([{"id": 1, "size": 1, "ranks": [0]}], "x", [{"id": "1", "size": 4, "ranks": [0, -4, 1], "compact": True}]):
        with pytest.raises(schema.WireError, match="groups"):  # not a group list at all: the hello is malformed
            schema.decode(messages.raw(HELLO, _hello(bad)))


def test_one_group_that_does_not_fit_is_dropped_and_counted_never_the_hello_or_the_rest():
    every = {"id": "9", "desc": "mesh_dp", "size": 4, "ranks": [0, 4, 1], "compact": True}  # a group of all 4 ranks
    pair = {"id": "2", "desc": "mesh_tp", "size": 2, "ranks": [0, 1]}
    unfit = [
        {"id": "1", "size": 2, "ranks": [0, 9]},  # a member beyond the world
        {"id": "3", "size": 3, "ranks": [0, 1]},  # fewer members than its size
        {"id": "4", "size": 2, "ranks": [1, 1]},  # a member twice
        {"id": "5", "size": 4, "ranks": [1, 4, 1], "compact": True},  # runs past the world
        {"id": "6", "size": 4, "ranks": [0, 3, 1], "compact": True},  # counts other than its size
        {"id": "7", "size": 4, "ranks": [0, 4, 0], "compact": True},  # no step
        {"id": "8", "size": 4, "ranks": [0, 4], "compact": True},  # not three numbers
        {"id": "10", "size": 4, "ranks": [0, 4, 1, 9], "compact": True},  # nor four (benchmarks/fuzz.py found it)
    ]
    hello = schema.decode(messages.raw(HELLO, _hello([every, *unfit, pair])))
    assert [g.id for g in hello.groups] == ["9", "2"] and hello.bad_groups == len(unfit)
    assert parallel_groups.members(hello.groups[0]) == [0, 1, 2, 3]
    assert schema.decode(messages.raw(HELLO, _hello([every, pair]))).bad_groups is None


def test_a_bad_layout_in_the_environment_is_said_and_ignored_a_bad_argument_raises(monkeypatch, capsys):
    from ranktop.probe import runtime
    from ranktop.transport.identity import Identity

    me = Identity(job="j", rank=0, local_rank=0, world=16, local_world=8, host="h", pid=1, launcher="torchrun")
    monkeypatch.setenv("RANKTOP_LAYOUT", "pp=3,dp=-1")
    assert runtime._stated_layout(None, me) == []
    assert "RANKTOP_LAYOUT ignored: layout: 'pp=3,dp=-1' does not divide 16 ranks" in capsys.readouterr().err
    monkeypatch.setenv("RANKTOP_LAYOUT", "pp=2,dp=-1")
    assert [g["role"] for g in runtime._stated_layout(None, me)] == ["pp", "dp"]
    with pytest.raises(ValueError, match="role=size"):
        runtime._stated_layout("pipes=2", me)


def test_the_rank_detail_title_names_the_rank_s_coordinates():
    import dataclasses

    from test_app_render import rank_row

    from ranktop.tui.screens.drill import rank_title

    row = dataclasses.replace(rank_row(3), coords={"pp": 1, "dp": 1})
    assert rank_title(row, ["pp", "dp"]).plain.startswith("rank 3 (pp 1, dp 1)  on ")
    assert rank_title(rank_row(3)).plain.startswith("rank 3  on ")


def test_a_viewer_learns_the_layout_from_hellos_with_a_group_over_every_rank_and_says_what_it_dropped():
    from ranktop.watch.aggregator import BAD_GROUPS, Aggregator

    agg = Aggregator("j")
    for rank in range(4):  # Megatron-style: tp pairs, pp across them, and a group of every rank (compact)
        groups = [{"id": "all", "desc": "DATA_PARALLEL_GROUP_WITH_CP", "size": 4, "ranks": [0, 4, 1], "compact": True},
                  {"id": f"tp{rank // 2}", "desc": "TENSOR_MODEL_PARALLEL_GROUP", "size": 2, "ranks": [rank // 2 * 2, rank // 2 * 2 + 1]},
                  {"id": f"pp{rank % 2}", "desc": "PIPELINE_MODEL_PARALLEL_GROUP", "size": 2,
                   "ranks": [rank % 2, rank % 2 + 2]}]  # fmt: skip
        if rank == 3:
            groups.append({"id": "x", "size": 2, "ranks": [3, 7]})  # beyond the world: this group goes, no other
        agg.ingest_frames(messages.frames(HELLO, rank, dict(messages.plain(messages.hello(rank)), groups=groups)))
    snap = agg.snapshot()
    assert snap.layout_roles == ["pp", "tp"]
    assert [r.coords for r in snap.ranks] == [{"pp": r // 2, "tp": r % 2} for r in range(4)]
    assert BAD_GROUPS in snap.errors and not any("malformed hello" in e for e in snap.errors), snap.errors


def test_a_rank_s_place_in_a_compact_group_is_worked_out_without_listing_its_members():
    every = msgspec.convert({"id": "1", "desc": "mesh_dp", "size": 1 << 21, "ranks": [0, 1 << 21, 2], "compact": True}, Group)
    assert parallel_groups.position(every, 4_000_000) == 2_000_000
    assert parallel_groups.position(every, 3) is None and parallel_groups.position(every, 1 << 22) is None
    listed = msgspec.convert({"id": "2", "size": 2, "ranks": [5, 1]}, Group)
    assert parallel_groups.position(listed, 1) == 1 and parallel_groups.position(listed, 0) is None
    layout = learn({r: [every] for r in (0, 2, 4_194_302)})
    assert [layout.of(r) for r in (0, 2, 4_194_302)] == [{"dp": 0}, {"dp": 1}, {"dp": 2_097_151}]
