"""The links the job's relays measured (relay/links.py), as the viewer last heard them: one entry per node pair.

Each relay says, about once a second, the rate its probes crossed from its
node to each peer it probed (a ``links`` message, wire/messages.py). The book
keeps each relay's latest word, and forgets a relay not heard for
:data:`FORGET_S` (its node gone, or probing turned off). Its size is the
job's relays times the peers each probes (at most 64: relay/links.py), and it
is read once per snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

from ranktop.wire.messages import Links

#: A relay not heard for this long no longer speaks for its links.
FORGET_S = 10.0
#: Relays kept at most (a job's nodes; a flood of made-up hosts cannot grow the book past it).
MAX_RELAYS = 65536


@dataclass(frozen=True)
class Link:
    """One measured link: from ``src``'s node to ``dst``'s, its rate (bytes a second) and least round trip."""

    src: str
    dst: str
    rate_bps: float
    rtt_s: float
    probes: int


class LinkBook:
    def __init__(self) -> None:
        self._latest: dict[str, tuple[float, Links]] = {}

    def take(self, msg: Links, now: float) -> None:
        if msg.host not in self._latest and len(self._latest) >= MAX_RELAYS:
            return
        self._latest[msg.host] = (now, msg)

    def links(self, now: float) -> list[Link]:
        """Every link measured by a relay heard lately, in order of its two ends."""
        for host in [h for h, (at, _) in self._latest.items() if now - at > FORGET_S]:
            del self._latest[host]
        return sorted(
            (Link(msg.host, rate.peer, rate.rate, rate.rtt, rate.probes)
             for _, msg in self._latest.values() for rate in msg.links if rate.peer != msg.host),
            key=lambda link: (link.src, link.dst),
        )  # fmt: skip

    def cost_bps(self) -> dict[str, float]:
        """What each relay said its probing sent a second."""
        return {host: msg.cost for host, (_, msg) in self._latest.items()}
