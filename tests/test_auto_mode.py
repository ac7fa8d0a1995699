"""Automatic mode's state machine (probe/auto.py), driven by events on a fake clock, then by real torch hooks."""

import threading

import pytest

from ranktop.probe import auto, recorder
from ranktop.probe.auto import AutoTimer
from ranktop.probe.recorder import Recorder


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(recorder, "_perf", c)
    monkeypatch.setattr(auto, "_perf", c)  # the phases automatic mode pushes itself (Recorder.push)
    return c


class Script:
    """A training loop as automatic mode sees it: outermost events, each taking fake milliseconds."""

    def __init__(self, clock):
        self.clock = clock
        self.rec = Recorder()
        self.timer = AutoTimer(self.rec)

    def wait(self, ms):
        self.clock.now += ms / 1000

    def data(self, ms=1):
        self.timer.data_begin()
        self.wait(ms)
        self.timer.data_end()

    def forward(self, ms=2, training=True):
        if self.timer.forward_begin(training):
            self.wait(ms)
            self.timer.forward_end()
        else:
            self.wait(ms)

    def backward(self, ms=4):
        self.timer.backward_begin()
        self.wait(ms)
        self.timer.backward_end()

    def optimizer(self, ms=3):
        self.timer.optimizer_begin()
        self.wait(ms)
        self.timer.optimizer_end()

    def iteration(self, fetch=True):
        """One plain training iteration at the default costs (fetch 1, forward 2, backward 4, optimizer 3 ms):
        the loop most tests vary from; ``fetch=False`` for a script without a DataLoader."""
        if fetch:
            self.data()
        self.forward()
        self.backward()
        self.optimizer()

    def steps(self):
        return [{"n": r["n"], "w": round(r["w"] * 1000, 3), **{k: round(v * 1000, 3) for k, v in r["p"].items()}} for r in self.rec.drain()]


def test_a_plain_loop_is_one_step_per_optimizer_step_with_contiguous_steps(clock):
    s = Script(clock)
    for _ in range(3):
        s.data(1)
        s.forward(2)
        s.wait(0.5)  # the loss function, outside any module: other
        s.backward(4)
        s.optimizer(3)
        s.wait(1)  # zero_grad and logging: other, in the step that just ended
    s.data(1)
    steps = s.steps()
    assert [x["n"] for x in steps] == [0, 1, 2]
    assert all(x == {"n": x["n"], "w": 11.5, "data": 1, "forward": 2, "backward": 4, "optimizer": 3} for x in steps), steps


def test_gradient_accumulation_is_one_step(clock):
    s = Script(clock)
    for _ in range(2):
        for _ in range(4):
            s.data(1)
            s.forward(2)
            s.backward(4)
        s.optimizer(3)
    s.data(1)
    steps = s.steps()
    assert len(steps) == 2
    assert steps[0] == {"n": 0, "w": 31, "data": 4, "forward": 8, "backward": 16, "optimizer": 3}


def test_two_optimizers_in_one_iteration_are_one_step(clock):
    s = Script(clock)
    for _ in range(3):
        s.data(1)
        s.forward(2)
        s.backward(4)
        s.optimizer(3)  # e.g. the encoder's optimizer
        s.optimizer(1)  # and the head's
    s.data(1)
    steps = s.steps()
    assert len(steps) == 3 and all(x["optimizer"] == 4 and x["w"] == 11 for x in steps)


def test_a_gan_iteration_with_a_dataloader_is_one_step(clock):
    s = Script(clock)
    for _ in range(2):
        s.data(1)
        s.forward(2)  # discriminator
        s.backward(4)
        s.optimizer(3)
        s.forward(2)  # generator, after the first optimizer step: same iteration (it began with a fetch)
        s.backward(4)
        s.optimizer(3)
    s.data(1)
    steps = s.steps()
    assert len(steps) == 2 and steps[0]["forward"] == 4 and steps[0]["optimizer"] == 6


def test_without_a_dataloader_the_next_training_forward_ends_the_step(clock):
    s = Script(clock)
    for _ in range(3):
        s.iteration(fetch=False)
        s.wait(1)
    s.forward(2)
    steps = s.steps()
    assert [x["w"] for x in steps] == [10, 10, 10] and "data" not in steps[0]


def test_an_evaluation_loop_is_not_a_step_but_the_phase_eval_of_the_next(clock):
    """Issue 46: an evaluation is timed for what it is (before, it was not timed at all, and a viewer saw every
    rank stuck for as long as it ran): from when its batches are seen to be one (the seventh eval-like event)
    to the next training forward, its fetches and forwards are the phase ``eval``, carried into the next step."""
    s = Script(clock)
    for _ in range(3):
        s.iteration()
    for _ in range(50):  # validation: fetch and forward under no_grad, 50 batches
        s.data(5)
        s.forward(20, training=False)
    for _ in range(3):
        s.iteration()
    s.data(1)
    steps = s.steps()
    assert [x["n"] for x in steps] == [0, 1, 2, 3, 4, 5]
    assert [x["w"] for x in steps if x["n"] != 3] == [10] * 5, steps
    # the 4th batch on (47 batches of 25 ms), and the fetch that turned out to be training's: eval, not data
    assert steps[3] == {"n": 3, "w": 1185, "eval": 1176, "forward": 2, "backward": 4, "optimizer": 3}, steps[3]
    assert s.timer.discarded >= 1 and not s.timer.evaluating


def test_an_evaluation_loop_without_a_dataloader_is_not_a_step_but_eval(clock):
    s = Script(clock)
    for _ in range(2):
        s.iteration(fetch=False)
    for _ in range(30):
        s.forward(20, training=False)
    s.iteration(fetch=False)
    s.forward(2)
    steps = s.steps()
    assert [x["w"] for x in steps] == [9, 9, 489], steps  # forwards 7 to 30 of the evaluation: 480 ms of eval
    assert steps[2]["eval"] == 480 and steps[2]["forward"] == 2, steps


def test_an_evaluation_ended_by_a_backward_or_an_optimizer_step_is_carried_into_that_step(clock):
    s = Script(clock)
    s.iteration()
    for _ in range(10):
        s.forward(10, training=False)
    s.backward(4)  # (a loop whose next training forward the hooks did not see)
    s.optimizer(3)
    s.data(1)
    steps = s.steps()
    assert steps[-1]["eval"] == 40 and steps[-1]["backward"] == 4 and not s.timer.evaluating, steps


def test_a_checkpoint_is_the_phase_checkpoint_of_the_step_it_is_saved_in(clock):
    s = Script(clock)
    for i in range(4):
        s.iteration()
        if i == 1:
            s.timer.checkpoint_begin()  # torch.save after the optimizer step
            s.wait(300)
            s.rec.end_phase()
    s.data(1)
    steps = s.steps()
    assert [x["w"] for x in steps] == [10, 310, 10, 10], steps
    assert steps[1]["checkpoint"] == 300 and all("checkpoint" not in x for x in steps if x["n"] != 1)


def test_a_no_grad_teacher_forward_inside_a_step_counts_as_forward(clock):
    s = Script(clock)
    for _ in range(3):
        s.data(1)
        s.forward(5, training=False)  # the teacher, under no_grad
        s.forward(2)  # the student
        s.backward(4)
        s.optimizer(3)
    s.data(1)
    steps = s.steps()
    assert len(steps) == 3 and all(x["forward"] == 7 and x["w"] == 15 for x in steps)


def test_explicit_phases_nest_inside_and_around_automatic_ones(clock):
    s = Script(clock)
    for _ in range(2):
        s.rec.begin_phase("fetch+augment")  # the script's own phase around the DataLoader fetch
        s.data(1)
        s.wait(2)  # augmentation, in the script's phase only
        s.rec.end_phase()
        s.timer.forward_begin(True)
        s.wait(1)
        s.rec.begin_phase("attention")  # the script's phase inside the model
        s.wait(3)
        s.rec.end_phase()
        s.timer.forward_end()
        s.backward(4)
        s.optimizer(3)
    s.data(1)
    steps = s.steps()
    assert steps[0] == {"n": 0, "w": 14, "fetch+augment": 2, "data": 1, "forward": 1, "attention": 3, "backward": 4, "optimizer": 3}


def test_a_script_that_marks_its_own_steps_gets_phases_only(clock):
    s = Script(clock)
    for _ in range(3):
        s.rec.begin_step()
        s.iteration()
        s.rec.end_step()
    steps = s.steps()
    assert [x["n"] for x in steps] == [0, 1, 2] and all(x["w"] == 10 and x["data"] == 1 for x in steps)
    assert s.timer.user_steps


# -- the real hooks, in this process ------------------------------------------------------

torch = pytest.importorskip("torch")


@pytest.fixture
def hooks():
    rec = Recorder()
    h = auto.TorchHooks(AutoTimer(rec)).install()
    yield h, rec
    h.remove()


def _loop(model, opt, loader, accumulate=1):
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y) / accumulate
        loss.backward()
        if (i + 1) % accumulate == 0:
            opt.step()
            opt.zero_grad()


def _data(n=16):
    ds = torch.utils.data.TensorDataset(torch.randn(n * 4, 8), torch.randn(n * 4, 1))
    return torch.utils.data.DataLoader(ds, batch_size=4)


def test_torch_hooks_time_a_real_loop_and_keep_hooks_off_submodules(hooks):
    h, rec = hooks
    from torch.nn.modules import module as nn_module

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    _loop(model, opt, _data(), accumulate=2)
    steps = rec.drain()
    assert len(steps) == 8  # 8 optimizer steps; the fetch that ends the epoch ends the last
    assert all(set(r["p"]) == {"data", "forward", "backward", "optimizer"} for r in steps)
    assert all(r["p"]["data"] > 0 and r["w"] >= sum(r["p"].values()) for r in steps)
    # discovery is over: only the root module's call is timed (torch's fast path kept: no module hook on it,
    # probe/auto.py TimedCall), the submodules are untouched, the global hook dicts are ours no more
    assert h._discovery == [] and list(h._roots) == [id(model)]
    assert not any(hook.__self__ is h for hook in nn_module._global_forward_pre_hooks.values() if hasattr(hook, "__self__"))
    assert model[0]._forward_pre_hooks == {} and model[0].__dict__.get("_compiled_call_impl") is None
    assert isinstance(model.__dict__["_compiled_call_impl"], auto.TimedCall)
    assert model._forward_pre_hooks == {} and model._forward_hooks == {}


def test_torch_hooks_ignore_other_threads(hooks):
    h, rec = hooks
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    worker = threading.Thread(target=_loop, args=(model, opt, _data(4)))
    worker.start()
    worker.join()
    assert rec.drain() == [] and rec.produced == 0


def test_removed_hooks_leave_torch_as_it_was():
    import torch.utils.data.dataloader as dl

    before = (torch.autograd.backward, dl._BaseDataLoaderIter.__next__)
    h = auto.TorchHooks(AutoTimer(Recorder())).install()
    assert torch.autograd.backward is not before[0]
    h.remove()
    assert (torch.autograd.backward, dl._BaseDataLoaderIter.__next__) == before


def test_hooks_narrowed_to_one_model_and_one_optimizer_ignore_the_others():
    from torch.nn.modules import module as nn_module

    rec = Recorder()
    model, other = torch.nn.Linear(8, 1), torch.nn.Linear(8, 1)
    opt, other_opt = torch.optim.SGD(model.parameters(), lr=0.01), torch.optim.SGD(other.parameters(), lr=0.01)
    global_hooks = dict(nn_module._global_forward_pre_hooks)
    h = auto.TorchHooks(AutoTimer(rec), model=model, optimizer=opt).install()
    try:
        assert dict(nn_module._global_forward_pre_hooks) == global_hooks  # no global module hook, ever
        for x, y in _data(4):
            other(x)  # not the watched model: not timed
            torch.nn.functional.mse_loss(model(x), y).backward()
            other_opt.step()  # not the watched optimizer: ends no step
            opt.step()
            opt.zero_grad()
        steps = rec.drain()
        assert len(steps) == 4 and all(set(r["p"]) == {"data", "forward", "backward", "optimizer"} for r in steps)
    finally:
        h.remove()


def test_probe_automatic_starts_the_probe_in_automatic_mode_and_shutdown_removes_the_hooks(rdv):
    from ranktop import probe
    from ranktop.probe import runtime

    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    before = torch.autograd.backward
    p = probe.automatic(model, opt)
    try:
        assert p is probe.get() and p.auto is not None and probe.automatic() is p  # idempotent
        _loop(model, opt, _data(4))
        assert p.recorder.produced == 4
    finally:
        probe.shutdown()
    assert runtime.active is runtime.DISABLED and torch.autograd.backward is before and auto._hooks is None


@pytest.mark.parametrize("where", ["forward_begin", "optimizer_begin", "data_begin", "end_phase", "end_phase of the optimizer"])
def test_a_fault_in_a_hook_switches_the_probe_off_and_training_goes_on(rdv, capfd, monkeypatch, where):
    """Anything raising inside automatic mode (here the state machine, at each kind of hook; inside the optimizer's
    hooks torch is iterating them, so they are removed at the next safe point) costs the probe, never the job.
    ``end_phase``: the recorder boundary the hooks close every phase with, raising out of it (as a replaced
    boundary, a device timeline's, could): the third step's backward, or its optimizer (in the optimizer's hook)."""
    from torch.nn.modules import module as nn_module

    from ranktop import probe
    from ranktop.probe import runtime

    calls = {"n": 0}
    name = where.split()[0]
    owner = recorder.Recorder if name == "end_phase" else AutoTimer
    original = getattr(owner, name)
    fault_at = {"end_phase": 11, "end_phase of the optimizer": 12}.get(where, 3)  # the third step (4 phases end in each)

    def faulty(self, *args):
        calls["n"] += 1
        if calls["n"] == fault_at:
            raise RuntimeError("injected fault")
        return original(self, *args)

    monkeypatch.setattr(owner, name, faulty)
    before = (torch.autograd.backward, dict(nn_module._global_forward_pre_hooks))
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    p = probe.automatic()
    try:
        _loop(model, opt, _data(8))  # would raise here if the fault reached training
        assert runtime.active is runtime.DISABLED and auto._hooks is None
        assert (torch.autograd.backward, dict(nn_module._global_forward_pre_hooks)) == before
        assert model._forward_pre_hooks == {} and model._forward_hooks == {}
    finally:
        probe.shutdown()
    err = capfd.readouterr().err
    assert err.count("ranktop: probe disabled") == 1 and "injected fault" in err and "training continues" in err
    assert p.recorder.produced >= 1


def test_torch_save_and_a_distributed_checkpoint_are_timed_as_checkpoint(hooks, tmp_path):
    """``torch.save`` at once; ``torch.distributed.checkpoint.save`` once the script has imported it (here after
    install, as a script under ``ranktop launch`` does: it is looked for again at the first optimizer step)."""
    import torch.distributed.checkpoint as dcp

    h, rec = hooks
    originals = (torch.save.__wrapped__, dcp.save)  # (torch.save was patched at install; dcp after it)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    saved = []
    for i, (x, y) in enumerate(_data(6)):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        if i == 2:
            torch.save(model.state_dict(), tmp_path / "model.pt")
            saved.append(i)
        if i == 4:
            dcp.save({"model": model.state_dict()}, checkpoint_id=str(tmp_path / "dcp"))
            saved.append(i)
    steps = rec.drain()
    assert [i for i, r in enumerate(steps) if "checkpoint" in r["p"]] == saved == [2, 4], [r["p"] for r in steps]
    assert all(r["p"]["checkpoint"] > 0 for r in steps if "checkpoint" in r["p"])
    assert dcp.save is not originals[1] and dcp.save.__wrapped__ is originals[1]
    h.remove()
    assert (torch.save, dcp.save) == originals


def test_a_real_evaluation_loop_in_eval_mode_is_the_phase_eval(hooks):
    h, rec = hooks
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        model.train()
        _loop(model, opt, _data(4))
        model.eval()
        with torch.no_grad():
            for x, _ in _data(10):
                model(x)
    steps = rec.drain()
    evals = [r for r in steps if "eval" in r["p"]]
    assert len(evals) == 1 and evals[0]["p"]["eval"] > 0, [r["p"] for r in steps]  # the second's is still open
    assert h.timer.evaluating and rec.current_phase == "eval"


def test_a_watched_model_and_optimizer_still_deepcopy_and_save(tmp_path):
    """An EMA copy (``copy.deepcopy``) and ``torch.save(model)`` copy a module's hooks: ours copy as inert ones
    (a checkpoint must not need ranktop to load; before, both failed: "cannot pickle 'module' object")."""
    import copy
    import pickle

    rec = Recorder()
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    h = auto.TorchHooks(AutoTimer(rec), model=model, optimizer=opt).install()
    try:
        _loop(model, opt, _data(2))
        ema = copy.deepcopy(model)
        assert isinstance(model.__dict__["_compiled_call_impl"], auto.TimedCall)
        assert ema.__dict__.get("_compiled_call_impl") is None  # the copy's calls are its own, untimed
        opt_copy = copy.deepcopy(opt)
        torch.save(model, tmp_path / "model.pt")
        loaded = torch.load(tmp_path / "model.pt", weights_only=False)
        blob = pickle.dumps(model)
        assert b"ranktop.probe" not in blob  # no class or function of ours in the pickle
        x = torch.randn(4, 8)
        before = rec.produced
        assert torch.equal(ema(x), model(x)) and torch.equal(loaded(x), model(x))
        opt_copy.step()
        assert rec.produced == before  # copies are not the watched model: their calls end no step
    finally:
        h.remove()


def test_a_phase_pushed_inside_a_step_is_begin_phase_without_its_frame_until_the_boundaries_are_replaced(clock):
    """Automatic mode begins a phase inside an open step with ``Recorder.push`` (one C call); a recorder whose
    begin_phase was replaced (device timing marks every phase; a disabled one records nothing) has none, and
    automatic mode then calls begin_phase, so no phase escapes the replacement."""
    pushed, called = Script(clock), Script(clock)
    called.rec.push = None
    for s in (pushed, called):
        s.iteration()
        s.iteration()
    assert pushed.steps() == called.steps() == [{"n": 0, "w": 10, "data": 1, "forward": 2, "backward": 4, "optimizer": 3}]
    marked = []
    s = Script(clock)
    s.rec.replace_boundaries(begin_phase=lambda name, begin=s.rec.begin_phase: (marked.append(name), begin(name)))
    assert s.rec.push is None
    s.iteration()
    s.iteration()
    assert marked == ["data", "forward", "backward", "optimizer"] * 2
    s.rec.replace_boundaries(begin_step=s.rec.begin_step)  # (gpu_timing's arming swaps begin_step alone)
    assert Script(clock).rec.push is not None
