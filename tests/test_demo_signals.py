"""``ranktop demo`` ends its job on SIGHUP or SIGTERM even when its main thread cannot run a Python handler.

A closed terminal stops taking output; Textual's main thread then blocks on its
full write queue, and the kernel may hand the process's signal to any other
thread: Python would never run the handler (a CI run saw the demo and its
512-rank simulator outlive their terminal). Here the main thread blocks on a
lock while the signal is sent to another thread; the job must still stop.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ranktop.cli import demo


class _StuckApp:
    """What ``_close_with`` asks of the Textual app; this one never gets to exit (its main thread is blocked)."""

    def __init__(self):
        self.exits = 0

    def exit(self):
        self.exits += 1

    def call_from_thread(self, fn):
        fn()


@pytest.fixture
def signals_restored():
    saved = {sig: signal.getsignal(sig) for sig in demo.EXIT_SIGNALS}
    yield
    signal.set_wakeup_fd(-1)
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("signum", demo.EXIT_SIGNALS, ids=["SIGHUP", "SIGTERM"])
def test_a_signal_another_thread_takes_stops_the_job_and_the_viewer_while_the_main_thread_is_blocked(monkeypatch, signals_restored, signum):
    exits: list[int] = []
    monkeypatch.setattr(demo, "EXIT_GRACE_S", 0.2)
    monkeypatch.setattr(demo.os, "_exit", exits.append)  # the viewer's last resort, recorded instead
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        app = _StuckApp()
        demo._close_with(app, job)
        bystander = threading.Thread(target=time.sleep, args=(3,), name="bystander")
        bystander.start()
        blocked = threading.Lock()
        blocked.acquire()
        threading.Thread(target=lambda: (job.wait(), blocked.release()), daemon=True).start()
        signal.pthread_kill(bystander.ident, signum)  # the kernel's pick: not the main thread
        started = time.monotonic()
        blocked.acquire(timeout=10)  # the main thread, blocked in C (as on Textual's full write queue)
        took = time.monotonic() - started  # a tenth of a second on a quiet machine
        assert job.poll() is not None and took < 5, f"the job outlived the signal (running: {job.poll() is None}, {took:.1f} s)"
        deadline = time.monotonic() + 30  # (never leave before it: unpatched, its os._exit would end pytest)
        while not exits and time.monotonic() < deadline:
            time.sleep(0.02)
        assert exits == [128 + signum]  # and the viewer ends after its grace, whether or not the app closed
    finally:
        job.kill()
        job.wait()


def test_other_signals_on_the_wakeup_socket_stop_nothing(monkeypatch, signals_restored):
    """Textual's SIGWINCH (a resize) reaches the same wake-up socket: the job runs on."""
    exits: list[int] = []
    monkeypatch.setattr(demo.os, "_exit", exits.append)
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    saved_winch = signal.signal(signal.SIGWINCH, lambda *_: None)  # as Textual's driver installs one
    try:
        demo._close_with(_StuckApp(), job)
        signal.raise_signal(signal.SIGWINCH)
        time.sleep(0.5)
        assert job.poll() is None and exits == []
    finally:
        signal.signal(signal.SIGWINCH, saved_winch)
        job.kill()
        job.wait()


def test_a_terminal_that_hangs_up_with_no_sighup_for_the_demo_stops_the_job_and_the_viewer(monkeypatch, signals_restored):
    """``make demo`` in a tmux window killed: the kernel's SIGHUP goes to make (the session leader), which waits
    for its children and passes nothing on; the demo sees its terminal hang up."""
    exits: list[int] = []
    monkeypatch.setattr(demo, "EXIT_GRACE_S", 0.2)
    monkeypatch.setattr(demo, "HANGUP_CHECK_S", 0.1)
    monkeypatch.setattr(demo.os, "_exit", exits.append)
    master, terminal = os.openpty()  # not our controlling terminal: its hangup sends nobody a signal
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        demo._close_with(_StuckApp(), job, terminal)
        time.sleep(0.5)
        assert job.poll() is None and exits == [], "a live terminal stopped the job"
        os.close(master)  # the window is killed
        master = -1
        job.wait(timeout=5)
        deadline = time.monotonic() + 30
        while not exits and time.monotonic() < deadline:
            time.sleep(0.02)
        assert exits == [128 + signal.SIGHUP]
    finally:
        if master >= 0:
            os.close(master)
        os.close(terminal)
        job.kill()
        job.wait()
