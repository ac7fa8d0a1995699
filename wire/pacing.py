"""How often the relays of a job send what, by the job's size: the pace a relay's digests keep (relay/digest_fold.py)
and the viewer expects (watch/aggregator.py, watch/engine/receiver.py), and the simulator keeps too.

One rule for every side, so it is part of the contract: a viewer that counted on another pace would find a
rank silent that its relay only sends less often.
"""

from __future__ import annotations

#: The most raw calls a rank's sample holds (probe/collective_summary.py makes it, a node's digest keeps the latest).
SAMPLE_MAX = 12

#: How often a relay sends its node's digest, at most (a rank sends its own steps 4 times a second by default).
DIGEST_HZ = 4.0
#: Digests a second the whole job's relays send together, at most (:func:`digest_hz`). A viewer pays some 30 µs a
#: digest before its content counts (its wake-up, ``recv``, libzmq's I/O thread, the decode's checks): 8,192 a second
#: from the 2,048 nodes of a 16,384-rank job at :data:`DIGEST_HZ` were a quarter of a core for the count alone.
#: 2,048 keeps 4 Hz up to 512 nodes (4,096 ranks of 8) and gives 1 Hz at 2,048.
DIGEST_BUDGET = 2048.0
#: ... but never less often than this: a viewer finds a rank silent that it has not heard of for 3 s
#: (watch/aggregator.py), so beyond 2,048 nodes the budget gives way.
MIN_DIGEST_HZ = 1.0
#: A rank's hello rides in the digest at least this often, so a viewer that attaches late learns who it is
#: (as often as a rank sends its own: a viewer that watches for a few seconds must not miss it).
HELLO_EVERY_S = 2.0
#: A running rank's state rides in the digest this often (what it says changes slowly; it costs the viewer
#: more than the steps themselves, times thousands of ranks: at 4,096 ranks every 2 s rather than every
#: second, 15% less of the viewer's receiving). A rank that made no step has its state sent at once, so a
#: stall is seen as soon as ever; and a viewer takes a rank's newer steps over its older state's step age
#: (watch/analysis/stalls.py: stuck_s), so a state two seconds old never makes a running rank look stuck.
SLOW_EVERY_S = 2.0
#: ... and its collectives, summed since they were last sent, this often: the viewer works its collective rows
#: out again every 2 s at the sizes that take digests (watch/aggregator.py), and op summaries are most of what
#: a digest costs it (at 4,096 ranks, every 2 s rather than every second: 35% less decode and ingest per digest).
OPS_EVERY_S = 2.0
#: Rank entries with a running rank's state, hello or collectives a second the whole job's relays send together, at
#: most (:func:`slow_factor`): each such entry costs a viewer some 10 µs to decode and take, most of all it does per
#: rank (at 16,384 ranks, every 2 s, 8,192 entries a second were a fifth of a core). 4,096 keeps the cadences above
#: up to 8,192 ranks and doubles them at 16,384. A rank that made no step, or whose capture moved, is never kept
#: waiting, and its steps ride every digest whatever the job's size.
ENTRY_BUDGET = 4096.0
#: A node's digest carries one rank's sample of raw calls (for the alpha-beta fit) this often, its ranks in
#: turn: 256 samples a second from 512 nodes is plenty for the fit, and the viewer decodes every one of them;
#: so in a job of more nodes each node's come as much less often (:func:`sample_every_s`: every 8 s at 2,048).
SAMPLE_EVERY_S = 2.0
#: ... the samples a second the whole job's relays send together, at most.
SAMPLE_BUDGET = 256.0


#: How often a relay says what its link probes measured (relay/links.py's ``links`` message): every second, less
#: often where the job's relays together would send more than :data:`LINKS_BUDGET` a second, and never less often
#: than :data:`LINKS_EVERY_MAX_S` (the viewer forgets a relay's links unheard for 10 s: watch/engine/link_book.py).
#: A link's rate moves every couple of seconds at most (its last few probes), so little is lost; at 2,048 nodes the
#: viewer decoded as many links messages as digests, and every third one now (benchmarks/scale.py, docs/performance.md).
LINKS_EVERY_S = 1.0
LINKS_BUDGET = 512.0
LINKS_EVERY_MAX_S = 3.0


def links_every_s(nodes: int) -> float:
    """Seconds between two ``links`` messages of one relay of a job of ``nodes`` nodes (see :data:`LINKS_BUDGET`)."""
    return min(LINKS_EVERY_MAX_S, max(LINKS_EVERY_S, nodes / LINKS_BUDGET))


def digest_hz(nodes: int) -> float:
    """How often each relay of a job of ``nodes`` nodes sends its digest: :data:`DIGEST_HZ`, less in a job so big that
    its relays together would send more than :data:`DIGEST_BUDGET` a second. The relays and the simulator pace their
    digests by this one rule. The price, at the biggest sizes only: a rank's steps reach the viewer up to one interval
    later (1 s at 2,048 nodes), and the viewer's window of 64 digests spans 64 s there rather than 16 s."""
    return max(MIN_DIGEST_HZ, min(DIGEST_HZ, DIGEST_BUDGET / max(1, nodes)))


def slow_factor(world: int) -> float:
    """How many times :data:`SLOW_EVERY_S`, :data:`HELLO_EVERY_S` and :data:`OPS_EVERY_S` a relay of a job of
    ``world`` ranks waits between two of a running rank's entries: 1, more in a job so big that its ranks' entries
    together would come to more than :data:`ENTRY_BUDGET` a second (2 at 16,384 ranks)."""
    return max(1.0, world / (ENTRY_BUDGET * SLOW_EVERY_S))


def sample_every_s(nodes: int) -> float:
    """How often a relay of a job of ``nodes`` nodes sends a sample of raw calls: :data:`SAMPLE_EVERY_S`, less
    often where the job's relays together would send more than :data:`SAMPLE_BUDGET` a second."""
    return max(SAMPLE_EVERY_S, nodes / SAMPLE_BUDGET)


def job_nodes(world: int, local_world: int | None, heard: int) -> int:
    """The job's nodes, as a relay learns them from a hello: its world size over its node's ranks (``local_world``,
    torchrun's LOCAL_WORLD_SIZE; where a launcher did not say it, the ``heard`` ranks of the node so far)."""
    per_node = local_world if local_world is not None and local_world > 0 else heard
    return -(-max(1, world) // max(1, per_node))
