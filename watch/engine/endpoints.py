"""The relays a viewer hears the job through: which it knows, which it has heard, which dropped, how late.

The aggregator keeps one :class:`Endpoints` (under its lock): the receiver tells it of relays found and of
connections made or lost, every message tells it when it arrived and how old it was. From that a snapshot
reads, in one :meth:`Endpoints.view`, what it needs to judge ranks fairly: whether this viewer is behind on
the job's messages (then a quiet rank is not yet silent), which relays dropped (their ranks are cut off,
not stalled), and which nodes it is still connecting to (their ranks are not yet heard).
"""

from __future__ import annotations

from dataclasses import dataclass

from ranktop.watch.statuses import CONNECTED, LOST, WAITING

#: Messages reaching this viewer this much later than they used to: it is behind (too much to decode), and says so.
BEHIND_AFTER_S = 1.0
#: A node first heard less than this long ago counts as not yet heard: while a viewer of thousands of ranks is still
#: connecting (CURVE handshakes with hundreds of relays take seconds) its ranks are not silent, and the ranks of the
#: nodes it has not reached yet are not "never heard from".
SETTLING_S = 5.0


@dataclass(slots=True)
class Endpoint:
    """A relay as a snapshot shows it. Not frozen, as the snapshot's other rows are not: a snapshot makes one for
    every relay of the job, and a frozen dataclass's ``__init__`` costs four times as much (at 2,048 relays, 2 ms a
    snapshot with the job's lock held)."""

    url: str
    host: str | None
    state: str  # one of ENDPOINT_STATES
    quiet_s: float  # seconds since the last message (or since we started waiting)
    ranks: tuple[int, ...] = ()  # the ranks last heard through it: those a lost relay took with it


@dataclass
class _Relay:
    url: str
    host: str | None
    added: float
    first_heard: float | None = None  # its first message: a node heard for less than SETTLING_S is still being connected
    last_heard: float | None = None
    down: bool = False  # the receiver saw its connection drop (a relay killed): lost now, not after silent_after_s
    dropped_at: float | None = None  # when it last dropped (or replaced a relay that did): ranks not heard since are cut off
    # How late its messages reach us: their age when ingested (our wall clock less their own), less the least
    # age seen (a constant clock skew between hosts is not lateness). Grows when this viewer falls behind.
    age_floor: float = float("inf")
    late_s: float = 0.0


@dataclass(frozen=True)
class EndpointsView:
    """What one snapshot reads of the relays."""

    behind_s: float  # how far behind this viewer is on the job's messages (0 below BEHIND_AFTER_S)
    links: dict[str, tuple[bool, float]]  # url -> (down now, when it last dropped): relays that ever dropped
    settling: frozenset[str]  # relays first heard less than SETTLING_S ago: their quiet ranks are not silent yet
    settled: bool  # every relay known has been heard, or was found SETTLING_S ago (a dead one): unheard ranks count

    def cut_off(self, endpoint: str | None, last_seen: float) -> bool:
        """A rank heard through a relay that dropped, and not heard through it since: cut off, not stalled."""
        link = self.links.get(endpoint) if endpoint is not None else None
        return link is not None and (link[0] or last_seen <= link[1])


class Endpoints:
    """Every relay this viewer knows, by telemetry URL. Not thread-safe: the aggregator's lock guards it."""

    def __init__(self) -> None:
        self._relays: dict[str, _Relay] = {}

    def urls(self) -> list[str]:
        return list(self._relays)

    def __len__(self) -> int:
        return len(self._relays)

    def add(self, url: str, host: str | None, now: float) -> None:
        if url not in self._relays:
            self._relays[url] = _Relay(url, host, now)

    def replace(self, old: str, new: str, host: str | None, now: float) -> None:
        """A node's relay came back elsewhere (a new port): the old one goes; the new one starts as a drop, so
        the node's ranks are cut off until heard through it."""
        self._relays.pop(old, None)
        if new not in self._relays:
            self._relays[new] = _Relay(new, host, now, dropped_at=now)

    def note_link(self, url: str, up: bool, now: float) -> None:
        relay = self._relays.get(url)
        if relay is not None:
            relay.down = not up
            if not up:
                relay.dropped_at = now

    def heard(self, url: str, now: float, age: float) -> None:
        """A message through ``url`` arrived at ``now``, ``age`` seconds after it was sent (by the two clocks)."""
        relay = self._relays.get(url)
        if relay is None:
            return
        if relay.first_heard is None:
            relay.first_heard = now
        relay.last_heard = now
        if age < relay.age_floor:
            relay.age_floor = age
        relay.late_s = age - relay.age_floor

    def host_of(self, url: str | None) -> str | None:
        relay = self._relays.get(url) if url is not None else None
        return relay.host if relay is not None else None

    def view(self, now: float) -> EndpointsView:
        relays = self._relays.values()
        behind = max((r.late_s for r in relays), default=0.0)
        return EndpointsView(
            behind_s=behind if behind > BEHIND_AFTER_S else 0.0,
            links={r.url: (r.down, r.dropped_at) for r in relays if r.dropped_at is not None},
            settling=frozenset(r.url for r in relays if r.first_heard is not None and now - r.first_heard < SETTLING_S),
            settled=all(r.first_heard is not None or now - r.added >= SETTLING_S for r in relays),
        )

    def rows(self, now: float, ranks_by_url: dict[str, tuple[int, ...]], lost_after_s: float) -> list[Endpoint]:
        """The snapshot's rows: each relay waiting (never heard), connected, or lost (quiet past ``lost_after_s``,
        or its connection dropped)."""
        out: list[Endpoint] = []
        add, ranks_of = out.append, ranks_by_url.get
        for r in self._relays.values():
            if r.last_heard is None:
                add(Endpoint(r.url, r.host, WAITING, now - r.added, ranks_of(r.url, ())))
            else:
                quiet = now - r.last_heard
                add(Endpoint(r.url, r.host, LOST if quiet > lost_after_s or r.down else CONNECTED, quiet, ranks_of(r.url, ())))
        return out
