"""Commands and their answers at scale: every answer of every rank is counted, and waiters wake on arrival.

1,024 simulated ranks, each message made by the probe's own Sender and read
through the real decoder (tests/messages.py), fed from another thread the way
the receiver feeds the aggregator.
"""

import threading
import time

import messages
from ranktop.cli.ping import answer_lines
from ranktop.tui.panes.status import SentCommand, command_text
from ranktop.watch.aggregator import MAX_REPLIES, Aggregator
from ranktop.watch.engine.requests import RequestBook
from ranktop.watch.session import Answers
from ranktop.wire.names import HEARTBEAT, REPLY
from ranktop.watch.model.json_doc import document

WORLD = 1024


def job_of(world: int) -> Aggregator:
    agg = Aggregator("j")
    for rank in range(world):
        s = messages.sender(rank, world)
        agg.ingest_frames(s.message(s.wire_hello()))
    return agg


def answer_from_another_thread(agg: Aggregator, command_id: str, ranks, cmd: str = "ping", failing=()):
    def run():
        for rank in ranks:
            body = {
                "id": command_id,
                "cmd": cmd,
                "ok": rank not in failing,
                "result": {"error": "no CUDA on this rank"} if rank in failing else {"pong": time.time()},
            }
            agg.ingest_frames(messages.frames(REPLY, rank, body, world=WORLD))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_ping_of_1024_ranks_counts_every_answer_in_the_status_line_and_the_ping_output():
    agg = job_of(WORLD)
    assert agg.world_size == WORLD
    agg.note_sent("c1", "ping")
    feeder = answer_from_another_thread(agg, "c1", range(WORLD), failing={700})
    replies = agg.requests.wait_replies("c1", range(WORLD), timeout=60)
    feeder.join()
    assert sorted(r.rank for r in replies) == list(range(WORLD))

    snap = agg.snapshot()
    assert len(snap.replies) == MAX_REPLIES  # the snapshot's list of the latest answers stays bounded...
    tally = snap.request("c1")  # ...but the tally of our own command counts them all
    assert (tally.answered, tally.failed, tally.first_failure) == (WORLD, 1, (700, "no CUDA on this rank"))
    line = command_text(SentCommand("c1", "ping", tuple(range(WORLD)), sent_at_s=snap.elapsed_s), snap).plain
    assert line.startswith("ping: 1024/1024 ranks answered") and "1 failed (rank 700: no CUDA on this rank)" in line

    lines = answer_lines(Answers("c1", tuple(range(WORLD)), replies, 0.1), timeout=5)
    assert len(lines) == WORLD and not [line for line in lines if "no answer" in line]
    assert document(snap)["requests"][0]["answered"] == WORLD


def test_ranks_that_do_not_answer_are_named_after_the_timeout():
    agg = job_of(8)
    agg.note_sent("c2", "stacks")
    answer_from_another_thread(agg, "c2", [r for r in range(8) if r not in (3, 5)], cmd="stacks").join()
    started = time.monotonic()
    replies = agg.requests.wait_replies("c2", range(8), timeout=0.3)
    assert time.monotonic() - started >= 0.3 and len(replies) == 6
    answers = Answers("c2", tuple(range(8)), replies, 0.3)
    assert answers.missing == [3, 5]
    assert [line for line in answer_lines(answers, 0.3) if "no answer" in line] == [
        "rank 3: no answer within 0.3s",
        "rank 5: no answer within 0.3s",
    ]


def test_a_waiter_wakes_when_the_last_answer_arrives_not_at_its_timeout():
    book = RequestBook()
    book.note_sent("c3", "ping")

    def answer_later():
        time.sleep(0.2)
        for rank in range(4):
            book.note_reply("c3", "ping", rank, True, {})

    threading.Thread(target=answer_later).start()
    started = time.monotonic()
    replies = book.wait_replies("c3", range(4), timeout=30)
    assert len(replies) == 4 and time.monotonic() - started < 10


def test_only_the_last_commands_are_kept_and_another_viewers_answers_are_not_counted():
    book = RequestBook(keep=2)
    for cid in ("a", "b", "c"):
        book.note_sent(cid, "ping")
    book.note_reply("a", "ping", 0, True, {})  # forgotten: its command is no longer kept
    book.note_reply("theirs", "ping", 0, True, {})
    book.note_reply("c", "ping", 1, True, {})
    assert [s.id for s in book.statuses()] == ["b", "c"]
    assert book.replies_to("a") == [] and [r.rank for r in book.replies_to("c")] == [1]


def test_commands_the_ranks_refused_and_their_rate_are_in_the_snapshot_the_status_line_and_the_json():
    from ranktop.tui.panes.status import status_text

    agg = job_of(4)
    for rank in range(4):
        state = {"step": 1, "last": 0, "rate_hz": 1.0, "rejected": {"forged": 2, "replayed": 1} if rank in (1, 2) else {}}
        agg.ingest_frames(messages.frames(HEARTBEAT, rank, {"state": state}, world=4))
    snap = agg.snapshot()
    assert [r.rejected for r in snap.ranks] == [{}, {"forged": 2, "replayed": 1}, {"forged": 2, "replayed": 1}, {}]
    assert {r.rate_hz for r in snap.ranks} == {1.0}
    line = status_text(snap).plain
    assert "commands refused: 4 forged, 2 replayed (ranks 1-2)" in line and "ranks send 1 msg/s" in line
    assert document(snap)["ranks"][1]["rejected"] == {"forged": 2, "replayed": 1}
