"""Device-side timing (probe/gpu_timing.py) on a fake event class: the pool, the marks, the sender's resolution.

No GPU here: :class:`FakeEvent` behaves like ``torch.cuda.Event`` on a GPU that
is behind the host: it completes only when the test says the device has got
that far, and ``elapsed_time`` reads the device's own (fake) clock.
"""

import pytest

from ranktop.probe.gpu_timing import CpuEvent, EventPool, Timeline, device_times
from ranktop.probe.recorder import Recorder


class Device:
    """A fake GPU: a queue of marks it reaches, one by one, with its own clock."""

    def __init__(self):
        self.clock = 0.0
        self.queue = []

    def run(self, seconds_per_mark):
        for event in self.queue:
            self.clock += seconds_per_mark
            event.done, event.t = True, self.clock
        self.queue = []


class FakeEvent:
    device = None

    def __init__(self):
        self.done, self.t = False, 0.0
        self.synchronized = False

    def record(self, stream=None):
        self.done = False
        FakeEvent.device.queue.append(self)

    def query(self):
        return self.done

    def synchronize(self):  # never to be called: the probe must not wait for the device
        self.synchronized = True
        raise AssertionError("synchronize() called")

    def elapsed_time(self, end):
        assert self.done and end.done
        return (end.t - self.t) * 1000


@pytest.fixture
def device():
    FakeEvent.device = Device()
    return FakeEvent.device


def timed_recorder(pool_size=64, hold_s=60.0):
    rec = Recorder()
    pool = EventPool(FakeEvent, pool_size)
    timeline = Timeline(rec, pool, hold_s=hold_s)
    timeline.attach()
    timeline._skip_step = False
    return rec, timeline, pool


def one_step(rec, phases=("data", "forward", "backward")):
    rec.begin_step()
    for name in phases:
        rec.begin_phase(name)
        rec.end_phase()
    rec.end_step()


def test_a_step_is_held_until_its_events_complete_then_carries_device_times(device):
    rec, timeline, pool = timed_recorder()
    one_step(rec)
    assert pool.available == 64 - 8  # start, 3 x (begin, end), end
    assert timeline.resolve(rec.drain()) == []  # the device has not got there: held, not waited for
    device.run(0.001)  # each mark 1 ms after the previous on the device
    (sent,) = timeline.resolve([])
    assert sent["g"]["w"] == pytest.approx(0.007)
    assert sent["g"]["p"] == pytest.approx({"data": 0.001, "forward": 0.001, "backward": 0.001})
    assert pool.available == 64  # events back in the pool


def test_nested_phases_get_device_self_time(device):
    rec, timeline, _ = timed_recorder()
    rec.begin_step()
    rec.begin_phase("forward")
    rec.begin_phase("attention")
    rec.end_phase()
    rec.end_phase()
    rec.end_step()
    device.run(0.002)
    (sent,) = timeline.resolve(rec.drain())
    # marks: s, b fwd, b attn, e attn, e fwd, S -> attention 2 ms, forward 6 - 2 = 4 ms
    assert sent["g"]["p"] == pytest.approx({"forward": 0.004, "attention": 0.002})


def test_records_keep_their_order_and_a_stuck_device_costs_only_the_device_times(device):
    rec, timeline, _ = timed_recorder(hold_s=0.0)
    one_step(rec)
    one_step(rec)
    out = timeline.resolve(rec.drain())  # hold_s=0: give up at once, send without g
    assert [r["n"] for r in out] == [0, 1] and all("g" not in r for r in out)


def test_an_empty_pool_means_no_device_times_never_an_allocation(device):
    rec, timeline, pool = timed_recorder(pool_size=5)
    one_step(rec)  # needs 8 events
    device.run(0.001)
    (sent,) = timeline.resolve(rec.drain())
    assert "g" not in sent and pool.available == 5


def test_discarded_steps_and_uncarried_phases_return_their_events(device):
    rec, timeline, pool = timed_recorder()
    rec.begin_step()
    rec.begin_phase("forward")
    rec.end_phase()
    rec.discard()
    assert pool.available == 64
    one_step(rec)
    device.run(0.001)
    (sent,) = timeline.resolve(rec.drain())
    assert set(sent["g"]["p"]) == {"data", "forward", "backward"}


def test_a_phase_before_the_step_is_carried_into_it_on_the_device_too(device):
    rec, timeline, _ = timed_recorder()
    rec.begin_phase("data")
    rec.end_phase()
    rec.begin_step()
    rec.begin_phase("forward")
    rec.end_phase()
    rec.end_step()
    device.run(0.001)
    (sent,) = timeline.resolve(rec.drain())
    assert sent["g"]["p"] == pytest.approx({"data": 0.001, "forward": 0.001})
    assert sent["g"]["w"] == pytest.approx(0.004)  # from the data's begin mark to the step's end


def test_cpu_events_run_the_same_path_on_the_host_clock(monkeypatch):
    rec = Recorder()
    Timeline(rec, EventPool(CpuEvent, 32), label="cpu").attach()
    rec.timeline._skip_step = False
    one_step(rec)
    (sent,) = rec.timeline.resolve(rec.drain())
    assert set(sent["g"]["p"]) == {"data", "forward", "backward"} and 0 <= sent["g"]["w"] <= sent["w"] + 1e-3


def test_device_times_of_an_incomplete_mark_list_are_none():
    assert device_times([]) is None
    assert device_times([("s", None, None), ("S", None, CpuEvent())]) is None
