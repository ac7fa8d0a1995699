"""The job's parallel layout, learned from the groups each rank's hello lists: coordinates and peer classes.

Each rank says which process groups it is in (wire/parallel_groups.py): their
members, their role when a name gives it (DeviceMesh dimension names, Megatron's
group descriptions) or when their use does (a group that carries send/recv is a
pipeline group), and the ranks it exchanges point-to-point messages with on the
default group. From that, every rank gets **coordinates**, its position in each
of its groups ("pp 1, dp 1"), and a **peer class**: the ranks doing the same work.

Ranks do different work by design only along the pipeline: a stage has its own
layers (the last one the loss head), so a rank is compared only with the ranks
at the same stage. Tensor, context, expert and data parallel ranks hold equal
shards of the same work, so they stay in one class: a tensor-parallel rank that
waits for its partner does so inside a (functional) collective, which is not
its own time.

Point-to-point on the default group (a pipeline with no group of its own):
the ranks a rank exchanges with form chains; their stage is a rank's position
in its chain, counted from the lowest rank (the usual layout puts the pipeline
outermost, so stage 0 holds the lowest ranks). That is a guess, said so in
docs/parallelism.md; a stated layout (``RANKTOP_LAYOUT``) overrides it.

Built only when some rank's groups change (hellos repeat every two seconds,
their groups almost never change): O(ranks x groups) then, a lookup per rank
on every refresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ranktop.wire import parallel_groups
from ranktop.wire.messages import Group

#: The role of a group used for point-to-point and named by nothing else.
PIPELINE = "pp"
#: The most point-to-point peers a probe lists (probe/process_groups.py keeps 64, and the rank itself).
MAX_PEERS = 65


@dataclass(frozen=True)
class Layout:
    """Every rank's coordinates and peer class."""

    coords: dict[int, dict[str, int]] = field(default_factory=dict)  # rank -> {role: position}
    roles: tuple[str, ...] = ()  # the roles seen, in parallel_groups.ROLES order
    sizes: dict[str, int] = field(default_factory=dict)  # role -> group size (the largest seen)

    @property
    def known(self) -> bool:
        return bool(self.coords)

    def of(self, rank: int) -> dict[str, int] | None:
        return self.coords.get(rank)

    def peer_class(self, rank: int) -> tuple[tuple[str, int], ...]:
        """The key shared by the ranks doing the same work: the rank's position along the uneven roles."""
        c = self.coords.get(rank)
        if not c:
            return ()
        return tuple((role, c[role]) for role in parallel_groups.UNEVEN if role in c)

    def classes(self, ranks: Iterable[int] = ()) -> dict[int, tuple[tuple[str, int], ...]] | None:
        """rank -> peer class (every rank the layout knows, and ``ranks``); None when every rank is in one class
        (no pipeline known). Worked out once per layout: a refresh of 4,096 ranks pays a lookup."""
        if not any(role in self.roles for role in parallel_groups.UNEVEN):
            return None
        known = self.__dict__.get("_classes")
        if known is None:
            known = {rank: self.peer_class(rank) for rank in self.coords}
            object.__setattr__(self, "_classes", known)  # a cache on a frozen dataclass
        missing = [rank for rank in ranks if rank not in known]
        if not missing:
            return known
        return {**known, **{rank: () for rank in missing}}

    def stage(self, rank: int) -> int | None:
        c = self.coords.get(rank)
        return c.get(PIPELINE) if c else None

    def text(self, rank: int) -> str:
        """``"pp 1, dp 1"`` (empty when nothing is known)."""
        c = self.coords.get(rank)
        if not c:
            return ""
        return ", ".join(f"{role} {c[role]}" for role in self.roles if role in c)


EMPTY = Layout()


def role_of(entry: Group) -> str:
    """A group's role: as the probe named it, from its description, or from its use (send/recv: pipeline)."""
    role = entry.role or parallel_groups.role_of(entry.desc)
    if not role and entry.p2p:
        role = PIPELINE
    return role


def learn(groups_of: Mapping[int, list[Group] | None]) -> Layout:
    """The layout from each rank's hello groups (``{rank: hello["groups"]}``)."""
    coords: dict[int, dict[str, int]] = {}
    sizes: dict[str, int] = {}
    chains: dict[int, set[int]] = {}  # point-to-point peers on the default group, to be joined into chains
    for rank, groups in groups_of.items():
        for entry in groups or ():
            if entry.id.startswith("p2p:"):
                if entry.size > MAX_PEERS:
                    continue  # no probe lists more: not a rank's peers
                for member in parallel_groups.members(entry):
                    chains.setdefault(rank, set()).add(member)
                continue
            role = role_of(entry)
            if not role:
                continue
            place = parallel_groups.position(entry, rank)
            if place is None or entry.size < 2:
                continue  # a group of one is a dimension of size 1 (Megatron makes cp, ep, dp ones): no coordinate
            coords.setdefault(rank, {})[role] = place
            sizes[role] = max(sizes.get(role, 0), entry.size)
    for component in _components(chains):
        ordered = sorted(component)
        for position, rank in enumerate(ordered):
            coords.setdefault(rank, {}).setdefault(PIPELINE, position)
        sizes[PIPELINE] = max(sizes.get(PIPELINE, 0), len(ordered))
    roles = tuple(role for role in parallel_groups.ROLES if role in sizes) + tuple(
        sorted(role for role in sizes if role not in parallel_groups.ROLES)
    )
    return Layout(coords, roles, sizes)


def _components(edges: dict[int, set[int]]) -> list[set[int]]:
    """Connected components of the point-to-point graph (each rank's peers, itself included)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for rank, peers in edges.items():
        for peer in peers:
            a, b = find(rank), find(peer)
            if a != b:
                parent[a] = b
    out: dict[int, set[int]] = {}
    for x in list(parent):
        out.setdefault(find(x), set()).add(x)
    return [c for c in out.values() if len(c) > 1]
