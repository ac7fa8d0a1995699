"""The process groups a rank is in, as its hello describes them, and the role each plays in the job.

One definition for both sides. The probe lists the groups it is a member of
(``hello["groups"]``, optional) and keys its collective summaries
by op and role (``"all_reduce@tp"``, ``"send@pp"``; ops on the default group keep
their bare name), so the viewer's collectives pane shows a row per group kind
and op with no more decoding. The viewer (watch/analysis/layout.py) turns the groups of
every rank into coordinates and peer classes.

A group entry::

    {"id": "3", "desc": "mesh_pp", "size": 2, "ranks": [start, count, stride] | [r0, r1, ...],
     "role": "pp", "p2p": true}

``id`` is torch's ``group_name``, the same on every member (groups are created
collectively, in the same order, on every rank), so the viewer can tell two
ranks in the *same* group from two ranks in groups of the same kind. ``ranks``
is compact when the members are an arithmetic progression (every DeviceMesh
group is): ``[start, count, stride]`` (wire/messages.py's ``Span``) with
``compact`` true; else the list. The decoder checks each group by its shape
(:func:`fits`) and drops the ones that do not hold, counting them, and keeps the
rest: a group spanning every rank (``[0, world, 1]``) is as good as any other.
A rank lists only the groups it is a member of.
"""

from __future__ import annotations

import msgspec

from .messages import Group, Span

#: Roles, in the order coordinates are written ("rank 3 (pp 1, tp 0, dp 1)").
ROLES = ("pp", "vpp", "cp", "ep", "tp", "dp_replicate", "dp_shard", "dp")
#: Roles whose members do different work by design: a rank is compared only with those at the same position.
UNEVEN = ("pp", "vpp")
#: The group descriptions torch and the big frameworks give their groups, and the role each names.
#: DeviceMesh describes a dimension's groups as ``mesh_<dim name>``; Megatron-LM's parallel_state passes
#: ``group_desc`` such as ``TENSOR_MODEL_PARALLEL_GROUP``. Only exact names count: Megatron's
#: ``MODEL_PARALLEL_GROUP`` (tp x pp), ``EMBEDDING_GROUP`` or ``DATA_PARALLEL_GROUP_WITH_CP`` (a second
#: data group beside ``DATA_PARALLEL_GROUP``) name no coordinate.
_ALIASES = {
    "pp": "pp", "pipe": "pp", "pipeline": "pp", "pipeline_model_parallel_group": "pp", "pipeline_parallel": "pp",
    "vpp": "vpp",
    "tp": "tp", "tensor": "tp", "tensor_model_parallel_group": "tp", "model": "tp", "mp": "tp",
    "cp": "cp", "context": "cp", "context_parallel_group": "cp", "sp": "cp",
    "ep": "ep", "expert": "ep", "expert_model_parallel_group": "ep", "moe": "ep",
    "dp": "dp", "data": "dp", "data_parallel_group": "dp", "dp_cp": "dp",
    "dp_replicate": "dp_replicate", "replicate": "dp_replicate",
    "dp_shard": "dp_shard", "shard": "dp_shard", "fsdp": "dp_shard", "dp_shard_cp": "dp_shard",
}  # fmt: skip
#: Groups that are no dimension of the layout but that a framework names: the label their ops are keyed by
#: ("all_reduce@embd"), never a coordinate. Megatron-LM's embedding groups join the first and last pipeline
#: stages (tied embeddings' gradients), its model-parallel group is tp x pp, and so on.
_LABELS = {
    "embedding_group": "embd", "position_embedding_group": "pos_embd", "model_parallel_group": "tp_pp",
    "tensor_and_data_parallel_group": "tp_dp", "tensor_and_data_parallel_group_with_cp": "tp_dp",
    "tensor_and_context_parallel_group": "tp_cp", "data_parallel_group_with_cp": "dp_cp",
    "expert_tensor_parallel_group": "ep_tp", "expert_data_parallel_group": "ep_dp",
    "expert_tensor_and_model_parallel_group": "ep_tp_pp", "expert_tensor_model_pipeline_parallel_group": "ep_tp_pp",
}  # fmt: skip
#: A hello lists at most this many groups (a rank is in a handful; more is a job creating groups in a loop).
MAX_GROUPS = 64
#: Longest description kept.
MAX_DESC = 64


def role_of(desc: str) -> str:
    """The role a group's description names ("mesh_tp" -> "tp"), or "" when it names none."""
    key = desc.strip().lower()
    for prefix in ("mesh_", "mesh-"):
        if key.startswith(prefix):
            key = key[len(prefix) :]
    return _ALIASES.get(key, "")


def label_of(desc: str) -> str:
    """What ops on a group of this description are keyed by: its role, else the name a framework gives a group
    that is no dimension ("EMBEDDING_GROUP" -> "embd"), else "" (its size will do)."""
    return role_of(desc) or _LABELS.get(desc.strip().lower(), "")


def compact(ranks: list[int]) -> list[int]:
    """Members as ``[start, count, stride]`` when they step evenly (and more than three), else as they are."""
    if len(ranks) > 3:
        stride = ranks[1] - ranks[0]
        if stride > 0 and all(b - a == stride for a, b in zip(ranks, ranks[1:])):
            return [ranks[0], len(ranks), stride]
    return list(ranks)


def members(group: Group) -> list[int]:
    """The member ranks of a group, in group-rank order."""
    if group.compact:
        start, count, stride = group.ranks  # a decoded hello's compact groups are spans (fits)
        return list(range(start, start + count * stride, stride))
    return list(group.ranks)


def position(group: Group, rank: int) -> int | None:
    """``rank``'s place in the group (its group rank), or None where it is no member: without listing a compact
    group's members (a group of every rank of a big job is millions of them)."""
    if group.compact:
        start, count, stride = group.ranks
        offset = rank - start
        if offset < 0 or offset % stride or offset // stride >= count:
            return None
        return offset // stride
    try:
        return group.ranks.index(rank)
    except ValueError:
        return None


def label(role: str, size: int) -> str:
    """What an op on a group is keyed by in a summary: its role, else its size ("g4")."""
    return role or f"g{size}"


def split_op(key: str) -> tuple[str, str | None]:
    """``"all_reduce@tp"`` -> ("all_reduce", "tp"); a bare op -> (op, None)."""
    op, _, role = key.partition("@")
    return op, role or None


def span(group: Group) -> Span | None:
    """A compact group's ``[start, count, stride]`` as the type it is, or None where the three numbers are not
    one (each is bounded by what it is: a rank, a group's size, a positive step)."""
    if len(group.ranks) != 3:  # msgspec would read the first three of more (array_like takes trailing extras)
        return None
    try:
        return msgspec.convert(group.ranks, Span)
    except msgspec.ValidationError:
        return None


def fits(group: Group, world: int) -> bool:
    """Whether one group holds together in a job of ``world`` ranks, checked by what it is: a compact group's
    span counts as many members as its size says and ends within the world; a listed group has as many
    members as its size says, each within the world, none twice."""
    size = group.size
    if size > world:
        return False
    if group.compact:
        s = span(group)
        return s is not None and s.count == size and s.start + (size - 1) * s.stride < world
    ranks = group.ranks
    return len(ranks) == size and all(r < world for r in ranks) and len(set(ranks)) == size


def sound(groups: list[Group], world: int) -> tuple[list[Group], int]:
    """The groups of a hello that hold together (wire/schema.py keeps only these on every hello and node
    digest), and how many did not: one bad group is dropped and counted, never the rank's whole list."""
    kept = [g for g in groups if fits(g, world)]
    return kept, len(groups) - len(kept)
