"""Fuzz what ranktop reads from others: messages, signed commands, node records. Prints inputs/s and crash classes.

Nothing from the network is trusted (docs/architecture.md): whatever a peer sends,
``schema.decode`` either rejects it with a ``WireError`` or hands on a message
that ``Aggregator.ingest`` and ``snapshot()`` read without raising; the command
verifier raises only ``AuthError``/``WireError``; the rendezvous reader skips a
bad node record. A *crash class* is an exception of another type, named by its
type and the line that raised it (the innermost frame of ranktop's own code).
The target is 0.

The inputs, in shares: real frames (the simulator's, and the probe's own
messages with every optional part: states with memory, GPU, capture and
collective, collective summaries with their sample of raw calls, replies) mutated where it hurts
(a key dropped, a value replaced by another type, NaN, infinities, huge or
negative numbers, deep nesting, a packed column's bytes damaged), generated structures with the real keys,
raw byte mutations, signed commands (mutated, then signed with the job's
secret so they reach the decoder), and node records. Hypothesis would take an
hour for a million inputs; this mutator does it in minutes
(tests/test_fuzz.py runs Hypothesis over the same targets for a few seconds).

    python benchmarks/fuzz.py                 # 1,000,000 inputs
    python benchmarks/fuzz.py --inputs 20000 --json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

import msgpack
import msgspec

from ranktop.watch.aggregator import Aggregator
from ranktop.probe import collective_summary
from ranktop.wire import auth, schema
from ranktop.wire.names import HEARTBEAT, HELLO, STEPS, TELEMETRY_KINDS
from ranktop.wire.messages import PROTOCOL_VERSION
from ranktop.wire.messages import Reply, Step, Steps
from ranktop.transport import rendezvous
from ranktop.watch.model.json_doc import document

#: Snapshots are taken every this many ingested inputs, and the aggregator replaced every RESET_EVERY.
SNAPSHOT_EVERY = 250
RESET_EVERY = 2_000
JOB = "fuzz"
SECRET = b"fuzz-secret"

_INTERESTING: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2, 7, 255, 2**31, -(2**31), 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1,
    0.0, -0.0, 0.5, -1.5, 1e-300, 1e300, -1e300, math.inf, -math.inf, math.nan,
    "", "x", "fuzz", "forward", "backward", "other", "comm", "all_reduce", "float32", "recording", "done", "failed",
    "\x00", "é" * 3, "a" * 300, b"", b"\xff\x00", [], [1], [None], ["x"], {}, {"x": 1}, {"": None}, {"n": 1},
)  # fmt: skip
_KEYS = (
    "v", "k", "job", "rank", "ts", "host", "world", "local_rank", "pid", "state", "steps", "cx", "cs", "id", "cmd",
    "ok", "result", "work", "relay", "n", "t", "w", "p", "g", "op", "seq", "b", "dt", "d", "ph", "t0", "ops", "mem", "gpu",
    "cap", "rss", "cuda", "alloc", "resv", "peak", "cap", "dev", "na", "util", "throttle", "last", "step", "in_step",
    "phase", "step_age", "dropped", "rejected", "rate_hz", "median_step_s", "collective", "inside", "st", "start", "dir",
    "at", "path", "err", "sum", "kind", "telemetry", "control", "started", "machine", "slurm_job", "args", "ranks",
    "r", "c", "hello", "exit", "ev", "win", "gc", "gc_n", "runq", "nvcsw", "groups", "desc", "size", "role", "compact",
    "p2p", "bad_groups",
)  # fmt: skip


# -- the corpus: real messages ---------------------------------------------------------------------------


def corpus() -> list[list[bytes]]:
    """Real frames: a simulated job's (hellos, steps with collective summaries and samples, heartbeats, the
    nodes' digests) and the probe's own messages carrying every optional part."""
    from ranktop.demo.simulate import Scenario, Simulator

    scenario = Scenario(
        job=JOB, ranks=8, nodes=2, calls_per_step=6, steps_per_s=20.0, slow_rank=3, slow_ms=20.0, slow_phase="backward", pp=2, tp=2
    )  # fmt: skip  (a layout: the hellos and digests carry process groups)
    with tempfile.TemporaryDirectory() as folder:
        sim = Simulator(scenario, folder)
        frames = sim.hellos(1.0e9) + [f for _, tick in sim.replay(1.0) for f in tick]
    with tempfile.TemporaryDirectory() as folder:  # and what a viewer of a big job takes: the nodes' digests
        frames += [f for _, tick in Simulator(scenario, folder).replay(2.0, digests=True) for f in tick]
    probe = probe_messages()
    return [_trimmed(f) for f in frames[:400:3]] + probe + [probe_digest(probe)]


def _trimmed(frames: list[bytes]) -> list[bytes]:
    """A real message cut to a few records of each list (the checks are per record: a few find what many would)."""
    msg = msgpack.unpackb(frames[1], raw=False)
    for key in ("steps", "cs", "cx", "ranks"):
        if isinstance(msg.get(key), list):
            msg[key] = msg[key][:3]
    for entry in msg.get("cs") or ():
        entry["ops"] = dict(list(entry["ops"].items())[:2])
    return [frames[0], msgpack.packb(msg, use_bin_type=True)]


#: A rank's process groups as a Megatron-style job's probe lists them: one spanning every rank (compact), a
#: tensor-parallel pair, a pipeline group that carried point-to-point ops, and a listed one the rank is not first in.
GROUPS = [
    {"id": "1", "desc": "DATA_PARALLEL_GROUP", "size": 4, "ranks": [0, 4, 1], "role": "dp", "compact": True},
    {"id": "2", "desc": "TENSOR_MODEL_PARALLEL_GROUP", "size": 2, "ranks": [0, 1], "role": "tp"},
    {"id": "3", "desc": "PIPELINE_MODEL_PARALLEL_GROUP", "size": 2, "ranks": [1, 3], "role": "pp", "p2p": True},
    {"id": "4", "desc": "EMBEDDING_GROUP", "size": 3, "ranks": [3, 1, 2]},
]


def probe_messages() -> list[list[bytes]]:
    """The probe's messages with everything a rank may send (built by its own Sender, as tests/messages.py does)."""
    from ranktop.transport.identity import Identity
    from ranktop.probe.recorder import Recorder
    from ranktop.probe.sender import Sender

    def fail(exc: BaseException) -> None:
        raise exc

    identity = Identity(job=JOB, rank=1, local_rank=1, world=4, local_world=4, host="node0", pid=101, launcher="torchrun")
    s = Sender(identity, Recorder(), rate_hz=4.0, directory=None, on_fault=fail)
    hello = dict(s.hello(), work={"dtype": "bf16", "batch": 32, "tokens": 4096, "flops": 1.2e12, "device": "cuda:0", "peak_tflops": 989.0},
                 relay={"telemetry": "tcp://node0:5555", "control": "tcp://node0:5556"}, groups=GROUPS)  # fmt: skip
    state = {
        "step": 12, "last": 11, "in_step": True, "phase": "backward", "step_age": 0.25, "dropped": 3, "rejected": {"forged": 2},
        "rate_hz": 4.0, "median_step_s": 0.2,
        "collective": {"op": "all_reduce", "seq": 40, "b": 4 << 20, "dt": "float32", "g": 4, "inside": True, "age": 0.1},
        "mem": {"rss": 1 << 30,
                "cuda": {"dev": 0, "alloc": 1 << 30, "resv": 2 << 30, "peak": 3 << 30, "retries": 0, "ooms": 0, "cap": 80 << 30}},
        "gpu": {"seq": 5, "t": 1.0e9, "name": "H100", "bus": "0000:01:00.0", "util": 87, "mem_util": 40, "mem_used": 1 << 30,
                "mem_total": 80 << 30, "power_w": 500.0, "power_limit_w": 700.0, "temp_c": 60, "sm_mhz": 1900, "sm_max_mhz": 1980,
                "throttle": ["power"], "pcie_tx": 1e9, "pcie_rx": 2e9},
        "cap": {"id": "c1", "kind": "trace", "st": "done", "start": 20, "steps": 3, "dir": "/tmp/c", "at": 22, "path": "/tmp/c/r1.json",
                "err": None,
                "sum": {"steps": 3, "ops": 10, "kernels": 5, "basis": "gpu", "wall_us": 1000, "compute": 0.5, "comm": 0.3, "idle": 0.2}},
        "ev": {"win": 10.0, "gc": 0.02, "gc_n": 40.0, "runq": 0.3, "nvcsw": 900.0},
    }  # fmt: skip
    call = {"op": "all_reduce", "seq": 1, "b": 1024, "dt": "float32", "g": 4, "d": 0.01, "n": 10, "ph": "backward", "t0": 5.0}
    records = [{"n": n, "t": 1.0e9 + n * 0.2, "w": 0.2, "p": {"forward": 0.05, "backward": 0.1}, "g": {"w": 0.18, "p": {"forward": 0.04}}}
               for n in range(8, 12)]  # fmt: skip
    calls = [dict(call, seq=i, b=1024 * (i + 1), n=8 + i % 4, t0=5.0 + i * 0.05) for i in range(8)]
    summaries, sample = collective_summary.summarise(calls)  # as the probe's sender folds what it drains

    def message(kind: str, body: dict[str, Any]) -> list[bytes]:
        """The rank's envelope and ``body`` as a plain map (some of the corpus is what the types refuse)."""
        return [kind.encode(), msgpack.packb({**s.origin(), **body, "v": list(PROTOCOL_VERSION), "k": kind}, use_bin_type=True)]

    return [
        message(HELLO, hello),
        s.message(s.steps_message(records, summaries, sample)),
        message(STEPS, {"steps": records, "state": state, "cs": msgspec.to_builtins(summaries), "cx": msgspec.to_builtins(sample)}),
        message(STEPS, {"steps": records[:2], "state": dict(state, gpu={"na": "rank uses no GPU"}, cap=None)}),
        message(HEARTBEAT, {"state": state}),
        s.message(Reply(**s.origin(), id="abc", cmd="stacks", ok=True, result={"threads": [], "digest": "d1"})),
        s.message(Reply(**s.origin(), id="abd", cmd="capture", ok=False, result={"error": "disk full\nmore"})),
    ]


def probe_digest(probe: list[list[bytes]]) -> list[bytes]:
    """A node's digest of the probe's messages: its step columns with device times (``g``) and a phase only some
    ranks name, its entries with state, ops, sample and hello (the simulator's digests carry neither)."""
    from ranktop.relay.digest_fold import NodeDigest

    fold = NodeDigest(JOB, "node0")
    for frames in probe:
        try:
            msg = schema.decode(frames)
        except schema.WireError:  # a corpus message the viewer refuses (the fuzz starts from it all the same)
            continue
        fold.add(msg)
        if isinstance(msg, Steps):  # a neighbour on the node: host times only, and a phase of its own
            records = [Step(n=rec.n, t=rec.t, w=rec.w, p={"data": 0.01}) for rec in msg.steps]
            fold.add(msgspec.structs.replace(msg, rank=2, steps=records))
    body = fold.body(0.0, 1.0e9)
    assert body is not None
    return schema.encode(body)


def _nest(depth: int) -> Any:
    out: Any = None
    for _ in range(depth):
        out = (out,)
    return out


#: Nested lists of several depths (as tuples: shared, never mutated; maps nested deeper come from _deep_bytes).
_NESTED = tuple(_nest(d) for d in (10, 40, 200, 400))


def _deep_bytes(depth: int) -> bytes:
    """A body nested ``depth`` deep, maps and arrays alternating (msgpack's packer refuses past 511 levels)."""
    return b"\x81\xa1x\x91" * (depth // 2) + b"\xc0"


# -- the mutator -----------------------------------------------------------------------------------------


class Mutator:
    """Fast structural mutations of decoded messages, plus generated structures and raw byte damage."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def value(self, depth: int = 0) -> Any:
        r = self.r
        roll = r.random()
        if roll < 0.55 or depth > 3:
            value = r.choice(_INTERESTING)
            return value.copy() if type(value) in (list, dict) else value  # a shared one would grow into a cycle
        if roll < 0.7:
            return r.uniform(-1e6, 1e6) if r.random() < 0.5 else r.randint(-(2**40), 2**40)
        if roll < 0.85:
            return [self.value(depth + 1) for _ in range(r.randint(0, 4))]
        return {self.key(): self.value(depth + 1) for _ in range(r.randint(0, 5))}

    def key(self) -> Any:
        """Mostly a real key; sometimes one msgpack carries but a ranktop map never has."""
        return self.r.choice(_KEYS) if self.r.random() < 0.9 else self.r.choice(("", "zz", b"k", 1, -1, None, 2.5))

    def nested(self) -> Any:
        """Deep nesting (the decoders' and the snapshot's recursion): made once, shared (tuples: never mutated)."""
        return self.r.choice(_NESTED)

    def mutate(self, obj: Any, rounds: int | None = None) -> Any:
        """``obj`` (a plain msgpack structure, not shared) changed in 1 to 4 places."""
        r = self.r
        for _ in range(rounds or r.choice((1, 1, 1, 2, 3, 4))):
            target = self.pick(obj)
            if target is None:
                return self.value()
            if isinstance(target, dict):
                keys = list(target)
                op = r.random()
                if keys and op < 0.3:
                    del target[r.choice(keys)]
                elif keys and op < 0.85:
                    key = r.choice(keys)
                    if isinstance(target[key], bytes) and r.random() < 0.7:  # a packed column (a digest's steps)
                        target[key] = self.bytes(target[key])
                    else:
                        target[key] = self.nested() if r.random() < 0.01 else self.value()
                else:
                    target[self.key()] = self.value()
            else:
                op = r.random()
                if target and op < 0.3:
                    del target[r.randrange(len(target))]
                elif target and op < 0.7:
                    target[r.randrange(len(target))] = self.value()
                elif target and op < 0.85:
                    target.extend(target[: r.randint(1, 3)])  # duplicates (a repeated step, a repeated call)
                else:
                    target.append(self.value())
        return obj

    def pick(self, obj: Any) -> dict | list | None:
        """A container inside ``obj``, by a random walk from the top (each level as likely as the next)."""
        if not isinstance(obj, (dict, list)):
            return None
        r = self.r
        for _ in range(12):
            children = [v for v in (obj.values() if isinstance(obj, dict) else obj) if isinstance(v, (dict, list))]
            if not children or r.random() < 0.3:
                return obj
            obj = r.choice(children)
        return obj

    def bytes(self, data: bytes) -> bytes:
        r = self.r
        b = bytearray(data)
        op = r.random()
        if not b or op < 0.3:
            return bytes(b[: r.randrange(len(b) + 1)])
        for _ in range(r.randint(1, 8)):
            i = r.randrange(len(b))
            if op < 0.7:
                b[i] = r.randrange(256)
            else:
                b[i:i] = bytes(r.randrange(256) for _ in range(r.randint(1, 4)))
        return bytes(b)


_PACKER = msgpack.Packer(use_bin_type=True)  # packb makes a Packer (and its buffer) per call: ten times slower


def _pack(obj: Any) -> bytes | None:
    try:
        return _PACKER.pack(obj)
    except (ValueError, TypeError, OverflowError):  # a key or a number msgpack cannot carry: not an input
        _PACKER.reset()
        return None


def _topic(msg: Any, r: random.Random) -> bytes:
    kind = msg.get("k") if isinstance(msg, dict) else None
    if isinstance(kind, str) and r.random() < 0.95:
        return kind.encode("utf-8", "replace")
    return r.choice((b"steps", b"hello", b"", b"command", b"node"))


# -- the targets -----------------------------------------------------------------------------------------


class Crashes:
    """Crash classes: (exception type, where it was raised) -> count and one example."""

    def __init__(self) -> None:
        self.classes: dict[str, dict[str, Any]] = {}

    def note(self, exc: BaseException, example: Any, target: str) -> None:
        key = f"{target}: {exc.__class__.__name__} at {_where(exc)}"
        entry = self.classes.get(key)
        if entry is None:
            self.classes[key] = {"count": 1, "message": str(exc)[:200], "example": repr(example)[:600]}
        else:
            entry["count"] += 1


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "ranktop" in f.filename] or frames
    last = ours[-1] if ours else None
    if last is None:
        return "?"
    path = last.filename.split("ranktop" + os.sep, 1)[-1]
    return f"{path}:{last.lineno} ({last.name})"


class IngestTarget:
    """decode -> ingest -> snapshot (-> to_json), as the receiver and the TUI drive them."""

    def __init__(self, crashes: Crashes):
        self.crashes = crashes
        self.aggregator = Aggregator(JOB)
        self.count = 0
        self.recent: list[Any] = []

    def feed(self, frames: list[bytes], example: Any) -> None:
        try:
            msg = schema.decode(frames)
        except schema.WireError:
            return
        except Exception as exc:  # noqa: BLE001 - a crash class
            self.crashes.note(exc, example, "decode")
            return
        if msg.KIND not in TELEMETRY_KINDS:
            return
        self.recent.append(example)
        del self.recent[:-8]
        try:
            self.aggregator.ingest(msg)
        except Exception as exc:  # noqa: BLE001
            self.crashes.note(exc, example, "ingest")
        self.count += 1
        if self.count % SNAPSHOT_EVERY == 0:
            self.check_snapshot()
        if self.count % RESET_EVERY == 0:
            self.aggregator = Aggregator(JOB)

    def check_snapshot(self) -> None:
        try:
            snap = self.aggregator.snapshot()
            json.dumps(document(snap))
            _views(snap)
        except Exception as exc:  # noqa: BLE001
            self.crashes.note(exc, self.recent[-8:], "snapshot")
            self.aggregator = Aggregator(JOB)  # one bad message must not count again for every later snapshot


def _views(snap: Any) -> None:
    """What reads a snapshot besides --json: the verdict line and the prometheus gauges' figures."""
    from ranktop.watch.model import verdict

    verdict.verdict(snap)


class VerifierTarget:
    """CommandVerifier.verify on signed (mutated) and unsigned (damaged) frames: AuthError or WireError only."""

    def __init__(self, crashes: Crashes):
        self.crashes = crashes
        self.verifier = auth.CommandVerifier(SECRET, JOB)

    def feed(self, frames: list[bytes], example: Any) -> None:
        try:
            self.verifier.verify(frames, now=1.0e9)
        except schema.WireError:  # AuthError is one
            pass
        except Exception as exc:  # noqa: BLE001
            self.crashes.note(exc, example, "verify")


class RendezvousTarget:
    """Node records as the rendezvous reader parses them (and, for a share, reads them from files)."""

    def __init__(self, crashes: Crashes, folder: str):
        self.crashes = crashes
        self.folder = folder
        self.job_dir = rendezvous.job_dir(JOB, folder)
        self.job_dir.mkdir(parents=True, exist_ok=True)

    def feed(self, text: bytes, example: Any, on_disk: bool) -> None:
        try:
            if on_disk:
                (self.job_dir / "node-fuzz.json").write_bytes(text)
                for record in rendezvous.read_nodes(JOB, self.folder):
                    record.is_stale()
                rendezvous.list_jobs(self.folder)
            else:
                record = rendezvous.parse_node(text)
                record.is_stale()
        except ValueError:  # parse_node's documented error (a bad record)
            pass
        except Exception as exc:  # noqa: BLE001
            self.crashes.note(exc, example, "rendezvous")


# -- the run ---------------------------------------------------------------------------------------------


def run(inputs: int, seed: int = 0, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    real = corpus()
    decoded = [msgpack.unpackb(f[1], raw=False) for f in real]
    packed_real = [f[1] for f in real]
    mut = Mutator(seed)
    r = mut.r
    crashes = Crashes()
    ingest = IngestTarget(crashes)
    verifier = VerifierTarget(crashes)
    node = {"job": JOB, "host": "node0", "telemetry": "tcp://node0:5555", "control": "tcp://node0:5556", "pid": os.getpid(),
            "started": 1.0e9, "machine": "node0", "slurm_job": "42"}  # fmt: skip
    command = {"job": JOB, "id": "c0", "cmd": "stacks", "args": {"limit": 3}, "ranks": [0, 1], "ts": 1.0e9, "v": [1, 4], "k": "command"}
    shares = {"mutated": 0, "generated": 0, "bytes": 0, "command": 0, "node": 0}
    with tempfile.TemporaryDirectory(prefix="ranktop-fuzz-") as folder:
        records = RendezvousTarget(crashes, folder)
        start, cpu = time.perf_counter(), time.process_time()
        for i in range(inputs):
            roll = r.random()
            if roll < 0.70:  # a real message, damaged in a few places
                shares["mutated"] += 1
                k = r.randrange(len(decoded))
                obj = mut.mutate(msgpack.unpackb(packed_real[k], raw=False))
                body = _pack(obj)
                if body is not None:
                    ingest.feed([_topic(obj, r), body], obj)
            elif roll < 0.78:  # a structure of real keys and random values
                shares["generated"] += 1
                kind = r.choice(TELEMETRY_KINDS)
                obj = {"v": [1, r.choice((0, 4, 9))], "k": kind, "job": JOB, "rank": r.randrange(16), "ts": 1.0e9}
                for _ in range(r.randint(1, 8)):
                    obj[r.choice(_KEYS)] = mut.value()
                body = _pack(obj)
                if body is not None:
                    ingest.feed([kind.encode(), body], obj)
            elif roll < 0.88:  # raw bytes: a frame damaged on the way, or nested deeper than any packer writes
                shares["bytes"] += 1
                k = r.randrange(len(real))
                if r.random() < 0.01:
                    frames = [real[k][0], _deep_bytes(r.choice((100, 1000, 3000, 100_000)))]
                else:
                    frames = [real[k][0], mut.bytes(real[k][1])]
                ingest.feed(frames, frames)
            elif roll < 0.96:  # a command: mutated, then signed (so it reaches the decoder), or damaged after signing
                shares["command"] += 1
                # every container fresh: a shared one ("v") grown by mutations would slow every later input
                obj = mut.mutate(dict(command, id=f"c{i}", args={"limit": 3}, ranks=[0, 1], v=list(command["v"])))
                body = _pack(obj)
                if body is not None:
                    topic = _topic(obj, r) if r.random() < 0.2 else b"command"
                    mac = auth._mac(SECRET, topic, body)
                    frames = [topic, body, mac]
                    if r.random() < 0.2:
                        frames = [topic, mut.bytes(body), mac] if r.random() < 0.5 else frames[: r.randrange(4)]
                    verifier.feed(frames, obj)
            else:  # a node record
                shares["node"] += 1
                obj = mut.mutate(dict(node))
                if r.random() < 0.1:
                    text = mut.bytes(json.dumps(node).encode())
                else:
                    try:
                        text = json.dumps(obj).encode()
                    except (TypeError, ValueError, RecursionError):
                        continue
                records.feed(text, obj, on_disk=r.random() < 0.02)
            if progress is not None and i % 100_000 == 0:
                progress(i)
        spent, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {
        "inputs": inputs,
        "seconds": round(spent, 2),
        "cpu_seconds": round(cpu, 2),
        "inputs_per_s": round(inputs / spent),
        "inputs_per_cpu_s": round(inputs / cpu),
        "shares": shares,
        "snapshots": ingest.count // SNAPSHOT_EVERY,
        "crash_classes": len(crashes.classes),
        "crashes": crashes.classes,
        "seed": seed,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="how many inputs (default 1,000,000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))

    def progress(i: int) -> None:
        if not args.json and i:
            print(f"  {i:,} inputs...", file=sys.stderr, flush=True)

    result = run(args.inputs, args.seed, progress)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['inputs']:,} inputs in {result['seconds']:.1f} s: {result['inputs_per_s']:,} inputs/s "
              f"({result['inputs_per_cpu_s']:,} per CPU second) "
              f"({', '.join(f'{k} {v:,}' for k, v in result['shares'].items())}; {result['snapshots']:,} snapshots)")  # fmt: skip
        print(f"crash classes: {result['crash_classes']} (target 0)")
        for name, entry in sorted(result["crashes"].items(), key=lambda kv: -kv[1]["count"]):
            print(f"  {entry['count']:>7,}  {name}: {entry['message']}")
            print(f"           e.g. {entry['example'][:300]}")
    return 1 if result["crash_classes"] else 0


if __name__ == "__main__":
    sys.exit(main())
