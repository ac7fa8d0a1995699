"""The process groups a rank's collectives run on: each group's id, size and role, known by the group object's
identity on the hot path, and the groups a rank is in, for its hello (wire/parallel_groups.py).

Ops on a group other than the default one are keyed ``op@role`` ("all_reduce@tp", "send@pp"): the role comes
from the group's description (DeviceMesh's ``mesh_<dim>``, Megatron's ``group_desc``), from the framework that
made it (DeepSpeed's pipeline grid), else from its use (a group that carries send/recv is a pipeline group).
A stated layout (``probe.init(layout=...)``, ``RANKTOP_LAYOUT``) wins over what torch says.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from ranktop.wire import parallel_groups

#: The role of pipeline traffic (wire/parallel_groups.py).
PIPELINE = "pp"


def _group_size(dist: Any, group: Any) -> int:
    try:
        return int(dist.get_world_size(group))
    except Exception:
        return 0


#: What the hot path knows of a group: [group object (kept alive so its id stays its own), id, size, label (its role,
#: or the name a framework gives a group that is no dimension), default group?] (a list: its role may be learnt later).
GroupInfo = list[Any]

#: id(group object) -> its GroupInfo.
_groups: dict[int, GroupInfo] = {}
#: torch group name -> the same list, for functional collectives (which name their group).
_groups_by_name: dict[str, GroupInfo] = {}
#: (id(DeviceMesh), dim) -> the same list, for DTensor's functional collectives.
_groups_by_mesh: dict[tuple[int, int], GroupInfo] = {}
_group_refs: list[Any] = []
#: Group ids point-to-point ops ran on (their role, if unnamed, is pipeline).
_p2p_groups: set[str] = set()
#: Peers (global ranks) of point-to-point ops on the default group: a pipeline with no group of its own.
_p2p_peers: set[int] = set()
#: Stated layout (probe.init(layout=...) or RANKTOP_LAYOUT): the groups it implies, in hello form.
_stated: list[dict[str, Any]] = []


def _group_info(dist: Any, group: Any) -> GroupInfo:
    """[group, id, size, role, default?] of a group object (None: the default group); cached by identity,
    so the hot path pays a dict lookup."""
    info = _groups.get(id(group))
    if info is not None:
        return info
    info = [group, "", 0, "", False]
    try:
        c10d = dist.distributed_c10d
        pg = group if group is not None else c10d._get_default_group()
        info[1] = str(getattr(pg, "group_name", "") or "")[: parallel_groups.MAX_DESC]
        info[2] = int(dist.get_world_size(pg))
        info[4] = pg is c10d._get_default_group()
        info[3] = "" if info[4] else _describe(pg)
    except Exception:
        pass
    if len(_groups) < 4 * parallel_groups.MAX_GROUPS:
        _groups[id(group)] = info
        if info[1]:
            _groups_by_name[info[1]] = info
    return info


def framework_roles() -> dict[int, str]:
    """id(process group) -> role, for the groups a framework names in its own objects rather than in their
    description: DeepSpeed's pipeline grid (``PipelineParallelGrid``, its ``pipe`` x ``data`` x ``model``
    topology, registered by its pipeline engine in ``deepspeed.runtime.pipe.p2p``) makes its groups with no
    description. Read where groups are described (cheap: a module lookup and a few attributes)."""
    grid = getattr(sys.modules.get("deepspeed.runtime.pipe.p2p"), "_grid", None)
    if grid is None:
        return {}
    roles = {}
    for attribute, role in (("pp_proc_group", "pp"), ("dp_proc_group", "dp"), ("slice_proc_group", "tp")):
        group = getattr(grid, attribute, None)
        if group is not None:
            roles[id(group)] = role
    return roles


def _describe(pg: Any) -> str:
    """A group's label: from its description, else from the framework that made it (:func:`framework_roles`)."""
    return parallel_groups.label_of(str(getattr(pg, "group_desc", "") or "")) or framework_roles().get(id(pg), "")


def _label(info: GroupInfo, p2p: bool) -> str:
    """The role suffix of an op's key: "" on the default group; the named role; "pp" for a group carrying
    point-to-point ops; else the group's size ("g4")."""
    if info[4]:
        return ""
    if info[3]:
        return info[3]
    if p2p or info[1] in _p2p_groups:
        return PIPELINE
    return parallel_groups.label("", info[2])


def _key(op: str, label: str) -> str:
    return f"{op}@{label}" if label else op


def _note_p2p(dist: Any, info: GroupInfo, args: Sequence[Any], kwargs: dict[str, Any] | None, name: str) -> bool:
    """Mark the group as carrying point-to-point traffic; on the default group, remember the peer. True where
    the op is on the default group with a peer of this rank's pipeline group: pipeline traffic (Megatron's
    interleaved schedule sends one direction there when its pipeline groups hold two ranks), keyed ``@pp``."""
    if info[4]:
        peer = kwargs.get("dst", kwargs.get("src")) if kwargs else None
        if peer is None and len(args) > 1:
            peer = args[1]
        if not isinstance(peer, int):
            return False
        if peer in (_pipeline_ranks if _pipeline_ranks is not None else _learn_pipeline_ranks(dist)):
            return True
        if len(_p2p_peers) < 64:
            _p2p_peers.add(peer)
    elif info[1] not in _p2p_groups:
        _p2p_groups.add(info[1])
    return False


#: The other ranks of this rank's pipeline groups (named pp by their description, or by a stated layout),
#: learned at its first point-to-point op on the default group (groups are made before training).
_pipeline_ranks: frozenset[int] | None = None


def _learn_pipeline_ranks(dist: Any) -> frozenset[int]:
    global _pipeline_ranks
    ranks: set[int] = set()
    try:
        for entry in _stated:
            if entry["role"] == "pp":
                start, *rest = entry["ranks"]
                ranks.update(range(start, start + rest[0] * rest[1], rest[1]) if entry.get("compact") else entry["ranks"])
        me = dist.get_rank()
        for pg, ranks_map in list(dist.distributed_c10d._world.pg_group_ranks.items()):
            if me in ranks_map and _describe(pg) == PIPELINE:
                ranks.update(ranks_map)
        ranks.discard(me)
    except Exception:
        pass
    _pipeline_ranks = frozenset(ranks)
    return _pipeline_ranks


def state_layout(text: str, rank: int, world: int) -> list[dict[str, Any]]:
    """The groups a stated layout puts ``rank`` in: ``"pp=2,dp=2"`` (outermost first, the last dimension
    varies fastest, as ``init_device_mesh`` lays ranks out; one dimension may be ``-1``: the rest).
    Raises ValueError on a layout that does not fit the world."""
    dims: list[list[Any]] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        name, _, size = part.partition("=")
        role = parallel_groups.role_of(name)
        if not role or not size.lstrip("-").isdigit():
            raise ValueError(f"layout: {part!r} is not role=size with a role among {', '.join(parallel_groups.ROLES)}")
        dims.append([role, int(size)])
    known = 1
    for _, size in dims:
        known *= size if size > 0 else 1
    rest = [d for d in dims if d[1] <= 0]
    if len(rest) > 1 or (rest and world % known):
        raise ValueError(f"layout: {text!r} does not divide {world} ranks")
    if rest:
        rest[0][1] = world // known
    total = 1
    for _, size in dims:
        total *= size
    if total != world:
        raise ValueError(f"layout: {text!r} is {total} ranks, the job has {world}")
    out = []
    stride = 1
    for role, size in reversed(dims):
        index = (rank // stride) % size
        start = rank - index * stride
        members = [start + i * stride for i in range(size)]
        ranks = parallel_groups.compact(members)
        entry = {"id": f"stated:{role}:{start}", "desc": f"stated_{role}", "size": size, "ranks": ranks, "role": role}
        if len(ranks) != size or size <= 3:
            entry["ranks"] = members
        else:
            entry["compact"] = True
        out.append(entry)
        stride *= size
    return out[::-1]


def groups_hello() -> list[dict[str, Any]]:
    """The groups this rank is in, for its hello (wire/parallel_groups.py); read by the sender thread.

    A stated layout wins. Else every group torch knows with this rank among its members, but the default
    one, with its members, description and role, and whether point-to-point ops ran on it.
    """
    if _stated:
        return _stated
    dist: Any = sys.modules.get("torch.distributed")
    out: list[dict[str, Any]] = []
    try:
        c10d = dist.distributed_c10d
        world = c10d._world
        default = c10d._get_default_group() if dist.is_initialized() else None
        me = dist.get_rank() if default is not None else -1
        named = framework_roles()
        for info in list(_groups.values()) if named else ():
            if not info[3] and not info[4] and id(info[0]) in named:
                info[3] = named[id(info[0])]  # a group used before its framework said what it is (one str store)
        for pg, ranks_map in list(world.pg_group_ranks.items()):
            if pg is default or len(out) >= parallel_groups.MAX_GROUPS or me not in ranks_map:
                continue  # torch may register groups this rank is not in (Megatron's): not its layout
            members = [g for g, _ in sorted(ranks_map.items(), key=lambda kv: kv[1])]
            name = str(getattr(pg, "group_name", "") or "")[: parallel_groups.MAX_DESC]
            desc = str(getattr(pg, "group_desc", "") or "")[: parallel_groups.MAX_DESC]
            role = parallel_groups.role_of(desc) or named.get(id(pg)) or (PIPELINE if name in _p2p_groups else "")
            ranks = parallel_groups.compact(members)
            entry = {"id": name, "desc": desc, "size": len(members), "ranks": ranks, "role": role}
            if len(ranks) != len(members):
                entry["compact"] = True
            if name in _p2p_groups:
                entry["p2p"] = True
            out.append(entry)
        if _p2p_peers and default is not None and len(out) < parallel_groups.MAX_GROUPS:
            # Point-to-point on the default group: the pipeline is this rank and its peers.
            members = sorted(_p2p_peers | {dist.get_rank()})
            out.append({"id": "p2p:" + ",".join(map(str, members))[:50], "desc": "p2p peers", "size": len(members),
                        "ranks": members, "role": "pp", "p2p": True})  # fmt: skip
    except Exception:
        return out
    return out
