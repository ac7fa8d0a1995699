"""A rank's collectives cross the wire as one summary per step and phase, with a bounded sample of raw calls."""

import pytest
import messages

from ranktop.probe import collective_summary
from ranktop.wire import schema
from ranktop.wire.names import STEPS
from ranktop.watch.aggregator import Aggregator


def call(seq, op="ddp_allreduce", b=100, d=0.010, n=0, ph="backward", t0=5.0):
    return {"op": op, "seq": seq, "b": b, "dt": "float32", "g": 4, "d": d, "n": n, "ph": ph, "t0": t0}


def test_overlapping_waits_count_once_per_phase_and_per_op():
    calls = [
        call(1, t0=5.000),
        call(2, t0=5.005),  # two buckets overlapping by 5 ms: 15 ms waited
        call(3, op="all_gather_into_tensor", b=800, d=0.004, t0=5.012),  # inside the buckets' span
        call(4, ph="forward", d=0.002, t0=4.0),
    ]
    summaries, sample = messages.plain(collective_summary.summarise(calls))  # as the wire carries them
    by_phase = {s["ph"]: s for s in summaries}
    backward = by_phase["backward"]
    assert backward["n"] == 0 and backward["w"] == pytest.approx(0.016)  # 5.000 .. 5.016
    calls_, nbytes, waited, total, longest, group, dtype, kernel, kbytes = backward["ops"]["ddp_allreduce"]
    assert kernel is None and kbytes is None  # no kernel time known for DDP's wait
    assert (calls_, nbytes, group, dtype) == (2, 200, 4, "float32")
    assert waited == pytest.approx(0.015) and total == pytest.approx(0.020) and longest == pytest.approx(0.010)
    assert by_phase["forward"]["w"] == pytest.approx(0.002)
    assert sample == calls  # few calls: all of them


def test_the_sample_is_bounded_and_spans_several_sizes_per_op():
    calls = [call(i, b=1000 * (i % 5 + 1), t0=5.0 + i) for i in range(400)]
    _, sample = messages.plain(collective_summary.summarise(calls))  # as the wire carries them
    assert len(sample) <= collective_summary.SAMPLE_MAX
    assert len({c["b"] for c in sample}) >= 3  # enough for the alpha-beta fit


def test_summaries_ride_in_a_steps_message_and_malformed_ones_are_refused():
    summaries, sample = messages.plain(collective_summary.summarise([call(1), call(2, t0=5.005)]))  # as the wire carries them
    body = {"job": "j", "rank": 0, "ts": 1.0, "steps": [], "cs": summaries, "cx": sample}
    msg = schema.decode(messages.raw(STEPS, body))
    assert messages.plain(msg)["cs"] == summaries and messages.plain(msg)["cx"] == sample and messages.plain(msg)["v"] >= [1, 4]
    good = summaries[0]
    for bad in (
        dict(good, w=-1.0),
        dict(good, n="3"),
        dict(good, ops={"ddp_allreduce": [2, 200, 0.01]}),  # too short
        dict(good, ops={"ddp_allreduce": [0, 200, 0.01, 0.01, 0.01, 4, "float32"]}),  # no calls
        dict(good, ops={"ddp_allreduce": [2, 200, 0.01, -0.01, 0.01, 4, "float32"]}),
        "not a map",
    ):
        with pytest.raises(schema.WireError):
            schema.decode(messages.raw(STEPS, dict(body, cs=[bad])))


def test_raw_calls_sent_beside_the_summaries_are_dropped_and_the_viewer_reads_the_summaries_alone():
    """Collectives ride as ``cs`` and ``cx`` only: a ``coll`` list of raw calls is no field of a steps message, so
    the decoder drops it unread, as any field wire/messages.py does not list, and it adds nothing to the picture."""
    agg = Aggregator("j")
    agg.ingest(messages.hello(0, 1, "h"))
    for n in range(4):
        calls = [call(2 * n + i, b=100 * (i + 1), n=n, t0=5.0 + i * 0.005) for i in range(2)]
        body = {
            "steps": [{"n": n, "t": 1.0 + n, "w": 0.05, "p": {"backward": 0.03}}],
            **messages.collectives(calls),
            "coll": calls + [call(100 + n, op="all_gather_into_tensor", n=n)],
        }
        msg = messages.decoded(STEPS, 0, body, world=1)
        assert "coll" not in messages.plain(msg)
        agg.ingest(msg)
    snap = agg.snapshot()
    assert snap.ranks[0].collective_s == pytest.approx(0.015)
    assert snap.ranks[0].phases["backward"] == pytest.approx(0.015)  # 30 ms in backward, 15 of them waited
    pick = [(c.rank, c.op, c.calls, c.bytes, round(c.mean_s, 9)) for c in snap.collectives]
    assert pick == [(-1, "ddp_allreduce", 8, 1200, 0.01), (0, "ddp_allreduce", 8, 1200, 0.01)]
