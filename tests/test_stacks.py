"""Stack dumps: what a rank collects (in this process), and how the TUI groups and labels them (pure logic)."""

import threading

import msgpack

from ranktop.probe import commands
from ranktop.probe import stacks as probe_stacks
import messages
from ranktop.watch.format import compress_ranks
from ranktop.watch.analysis.stacks import (
    LIBRARY,
    THIRD_PARTY,
    USER,
    Frame,
    build_report,
    label,
    parse_reply,
    report_json,
    report_lines,
    tier,
)

ROOTS = {
    "ranktop": ["/venv/lib/python3.11/site-packages/ranktop/probe"],
    "torch": ["/venv/lib/python3.11/site-packages/torch"],
    "site": ["/venv/lib/python3.11/site-packages"],
    "stdlib": ["/usr/lib/python3.11", "/venv/lib/python3.11"],
}
TORCH = "/venv/lib/python3.11/site-packages/torch"


def f(file, line, function, code=""):
    return Frame(file, line, function, code)


def ddp_rank():
    """A rank blocked in DDP's backward: the user's line, then torch down to the C++ engine."""
    return [
        f("/job/train.py", 350, "<module>", "sys.exit(main())"),
        f("/job/train.py", 318, "main", "loss.backward()  # DDP all-reduces the gradients here"),
        f(f"{TORCH}/_tensor.py", 625, "backward", "torch.autograd.backward("),
        f(f"{TORCH}/autograd/__init__.py", 354, "backward", "_engine_run_backward("),
        f(f"{TORCH}/autograd/graph.py", 841, "_engine_run_backward", "return Variable._execution_engine.run_backward("),
    ]


def hung_rank():
    return [
        f("/job/train.py", 350, "<module>", "sys.exit(main())"),
        f("/job/train.py", 313, "main", "faults.hang(step)"),
        f("/job/faults.py", 80, "hang", "time.sleep(0.1)"),
    ]


def reply(frames, phase, step=30, threads=()):
    main = {"name": "MainThread", "main": True, "daemon": False, "omitted": 0, "frames": [vars(x) for x in frames]}
    return {
        "threads": [main, *threads],
        "omitted_threads": 0,
        "roots": ROOTS,
        "state": {"step": step, "last": step - 1, "in_step": True, "phase": phase, "collective": None},
    }


def test_rank_ranges_are_compressed():
    assert compress_ranks([0, 1, 2, 3, 5, 6, 9]) == "0-3,5-6,9"
    assert compress_ranks([3, 0, 1]) == "0-1,3"
    assert compress_ranks([7]) == "7" and compress_ranks([]) == ""


def test_frames_are_sorted_into_user_third_party_and_library_code():
    assert tier("/job/train.py", ROOTS) == USER
    assert tier(f"{TORCH}/_tensor.py", ROOTS) == LIBRARY
    assert tier("/venv/lib/python3.11/site-packages/ranktop/probe/collectives.py", ROOTS) == LIBRARY
    assert tier("/venv/lib/python3.11/site-packages/ranktop/demo/faults.py", ROOTS) == THIRD_PARTY
    assert tier("/usr/lib/python3.11/threading.py", ROOTS) == LIBRARY
    assert tier("<frozen importlib._bootstrap>", ROOTS) == LIBRARY
    # without roots (an older probe), path patterns decide
    assert tier("/x/site-packages/torch/nn/modules/module.py") == LIBRARY
    assert tier("/usr/lib/python3.12/threading.py") == LIBRARY
    assert tier("/x/site-packages/transformers/trainer.py") == THIRD_PARTY
    assert tier("/home/me/train.py") == USER


def test_the_label_names_the_call_on_the_innermost_user_line():
    assert label(ddp_rank(), ROOTS) == "loss.backward at train.py:318"
    assert label(hung_rank(), ROOTS) == "time.sleep at faults.py:80"
    # the call leading inward wins over the line's first call; the probe's own wrapper is skipped
    frames = [
        f("/job/train.py", 88, "step", "print(dist.all_reduce(t))"),
        f(f"{TORCH}/distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)"),
        f("/venv/lib/python3.11/site-packages/ranktop/probe/collectives.py", 190, "wrapped", "return original(*a)"),
    ]
    assert label(frames, ROOTS) == "print at train.py:88"
    frames[1] = f(f"{TORCH}/distributed/distributed_c10d.py", 2500, "all_reduce", "work.wait()")
    assert label(frames, ROOTS) == "dist.all_reduce at train.py:88"
    assert label([f("/job/loop.py", 5, "spin", "x += 1")], ROOTS) == "in spin at loop.py:5"
    # only library frames: the innermost one
    assert label([f("/usr/lib/python3.11/threading.py", 320, "wait", "waiter.acquire()")], ROOTS) == "waiter.acquire at threading.py:320"


def test_ranks_group_by_identical_main_stack_biggest_group_first():
    replies = [(r, True, reply(ddp_rank(), "backward")) for r in (0, 1, 3)]
    replies.append((2, True, reply(hung_rank(), "forward")))
    report = build_report(range(5), replies)
    assert [g.summary for g in report.groups] == [
        "ranks 0-1,3: loss.backward at train.py:318 (backward, step 30)",
        "rank 2: time.sleep at faults.py:80 (forward, step 30)",
    ]
    assert report.unresponsive == (4,)
    lines = report_lines(report, waited_s=5)
    assert lines[2] == "rank 4: no answer within 5s (unresponsive)"
    assert '  File "/job/faults.py", line 80, in hang' in lines and "    time.sleep(0.1)" in lines
    doc = report_json(report, waited_s=5)
    assert doc["unresponsive"] == [4] and doc["groups"][1]["ranks"] == [2]
    assert doc["ranks"]["2"]["threads"][0]["frames"][-1]["line"] == 80


def test_a_failed_answer_and_garbage_are_reported_not_raised():
    report = build_report(
        [0, 1, 2], [(0, False, {"error": "boom\nmore"}), (1, True, {"threads": [1, {"frames": [3]}], "roots": 5}), (2, True, "x")]
    )
    assert report.failed == {0: "boom", 2: "failed"} and report.unresponsive == ()
    assert report.ranks[1].main is None and report.groups[0].label == "no main thread reported"


def test_a_rank_collects_every_thread_from_another_thread():
    release = threading.Event()
    answer = {}

    def blocked_in_wait():
        release.wait()

    def ask():  # the probe's sender thread does this while the training thread is blocked
        answer.update(probe_stacks.collect())

    worker = threading.Thread(target=blocked_in_wait, name="loader")
    worker.start()
    try:
        asker = threading.Thread(target=ask, name="ranktop-probe")
        asker.start()
        asker.join(10)
    finally:
        release.set()
        worker.join(10)
    names = [t["name"] for t in answer["threads"]]
    assert names[0] == threading.main_thread().name and answer["threads"][0]["main"]
    assert "loader" in names and "ranktop-probe" in names
    loader = next(t for t in answer["threads"] if t["name"] == "loader")
    assert any(fr["function"] == "blocked_in_wait" and fr["code"] == "release.wait()" for fr in loader["frames"])
    rank = parse_reply(0, answer)
    # the main thread was blocked in join(): its stack shows where, innermost last
    functions = [fr.function for fr in rank.main.frames]
    assert "test_a_rank_collects_every_thread_from_another_thread" in functions and functions[-1] != functions[0]
    assert rank.main.frames[-1].file.endswith("threading.py")
    assert any(p.endswith("probe") for p in answer["roots"]["ranktop"])


def test_stack_replies_are_bounded():
    def deep(n):
        if n:
            return deep(n - 1)
        return probe_stacks.collect()

    answer = deep(500)
    main = answer["threads"][0]
    assert len(main["frames"]) == probe_stacks.MAX_FRAMES and main["omitted"] > 450
    assert [fr["function"] for fr in main["frames"][-3:]] == ["deep", "deep", "collect"]
    assert len(msgpack.packb(answer)) < 64 * 1024


def test_the_stacks_command_checks_its_argument_and_adds_the_state():
    class Target:
        rate_hz = 4.0

        def state(self):
            return {"step": 3, "phase": "forward"}

    ok, result = commands.run(Target(), "stacks", {})
    assert ok and result["state"]["phase"] == "forward" and result["threads"][0]["main"]
    ok, result = commands.run(Target(), "stacks", {"max_frames": 2})
    assert ok and all(len(t["frames"]) <= 2 for t in result["threads"])
    ok, result = commands.run(Target(), "stacks", {"max_frames": "all"})
    assert not ok and "max_frames" in result["error"]


def test_every_rank_s_answer_to_our_own_command_is_kept_however_many_ranks():
    from ranktop.watch.aggregator import MAX_REPLIES, Aggregator

    agg = Aggregator("j")
    agg.note_sent("ours")
    for rank in range(600):
        agg.ingest(messages.reply(rank, "ours", "stacks", result={"threads": []}, world=600))
        agg.ingest(messages.reply(rank, "theirs", "ping", world=600))
    assert len(agg.snapshot().replies) == MAX_REPLIES
    assert [r.rank for r in agg.replies_to("ours")] == list(range(600))
    assert agg.replies_to("theirs") == []  # another TUI's command: only the bounded list has it


def test_thousands_of_ranks_send_a_fingerprint_and_one_rank_per_group_its_stacks():
    """At scale ``stacks`` goes in two rounds: every rank's fingerprint, then the full stacks of one rank per fingerprint."""
    from ranktop.probe import stacks as probe_stacks
    from ranktop.watch.analysis.stacks import representatives

    def collected(frames):
        stacks = reply(frames, "x")
        del stacks["state"]
        return stacks

    def answer(frames, phase, fingerprint_only):
        return probe_stacks.answer(collected(frames), {"step": 30, "last": 29, "in_step": True, "phase": phase}, fingerprint_only)

    waiting, culprit = answer(ddp_rank(), "backward", True), answer(hung_rank(), "data", True)
    assert set(waiting) == {"fingerprint", "state"} and waiting["fingerprint"] != culprit["fingerprint"]
    replies = [(r, True, culprit if r == 3071 else waiting) for r in range(4096)]
    assert representatives(replies) == [0, 3071]
    full = [(0, True, answer(ddp_rank(), "backward", False)), (3071, True, answer(hung_rank(), "data", False))]
    report = build_report(range(4096), replies, full)
    assert [len(g.ranks) for g in report.groups] == [4095, 1] and report.groups[1].ranks == (3071,)
    assert report.groups[1].label == "time.sleep at faults.py:80" and report.groups[1].where.startswith("data")
    assert report.ranks[5].main is report.ranks[7].main  # one parsed stack shared by the group, not 4,095 copies
    # a group whose representative never answered is still a group, said to be unfetched
    partial = build_report(range(4096), replies, full[:1])
    assert "stacks not fetched" in partial.groups[1].label and partial.complete
