"""The names both sides spell alike: message kinds, standard phases, and the leaf every other wire module imports.

It imports nothing of ranktop, so any module may import it without a circle.
"""

from __future__ import annotations

#: The standard phases, in the order bars are drawn. Users may add phases of their own.
STANDARD_PHASES = ("data", "forward", "backward", "optimizer")
#: The name of the time a step spent outside every named phase.
OTHER_PHASE = "other"
#: The name of the time a step spent waiting in collectives (taken out of the phases it happened in).
COMM_PHASE = "comm"
#: The phases that are no step's training work: saving a checkpoint, evaluating the model, torch.compile compiling
#: (a recompilation). Automatic mode times ``torch.save`` and ``torch.distributed.checkpoint``'s saves, and
#: evaluation loops, as these; the probe, automatic or not, times dynamo's compilations inside a step as
#: ``compile`` (probe/compile_phase.py); ``probe.phase()`` of any of these names is the same. The viewer judges them
#: apart (watch/analysis/pauses.py): never a straggler's work, and ranks waiting for them are waiting, not stalled.
CHECKPOINT_PHASE = "checkpoint"
EVAL_PHASE = "eval"
COMPILE_PHASE = "compile"
PAUSE_PHASES = (CHECKPOINT_PHASE, EVAL_PHASE, COMPILE_PHASE)

# Message kinds (the topic frame). Telemetry flows rank -> relay -> TUIs.
HELLO = "hello"  # a rank's metadata; re-sent periodically so late TUIs learn it
STEPS = "steps"  # a batch of completed step records
HEARTBEAT = "heartbeat"  # sent when a rank has nothing else to say: it is alive
REPLY = "reply"  # a rank's answer to a control command
NODE = "node"  # a relay's digest of its node's ranks (relay/digest_fold.py), for the biggest jobs
LINKS = "links"  # a relay's measured links to the job's other relays (relay/links.py)
# Control flows TUI -> relay -> ranks, always signed (see ranktop.wire.auth).
COMMAND = "command"

TELEMETRY_KINDS = (HELLO, STEPS, HEARTBEAT, REPLY, NODE, LINKS)
#: What a rank itself sends (a viewer takes either these, step by step, or the node digests).
RANK_KINDS = (HELLO, STEPS, HEARTBEAT, REPLY)
KINDS = TELEMETRY_KINDS + (COMMAND,)
