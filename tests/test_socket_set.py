"""The receiver's socket set: a socket that may have a message is handed out, and again while it has one, whatever
its descriptor's edges said; a reader that tries one and finds nothing leaves it quiet."""

import time

import pytest
import zmq

from ranktop.watch.engine.socket_set import SocketSet


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.destroy(linger=0)  # every socket closed, even after a failed assertion (a bare term() would hang)


def pair(ctx, name):
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind(f"inproc://{name}")
    b.connect(f"inproc://{name}")
    return a, b


def ready(sockets, timeout=5.0):
    """The sockets ready, once any is, within ``timeout`` (a message crosses libzmq's pipes in a moment, not at
    once; a busy machine's moment may be long)."""
    end = time.monotonic() + timeout
    while True:
        found = sockets.wait(0.02)
        if found or time.monotonic() > end:
            return found


def read_nothing(sock):
    """What the receiver's reader does with a socket handed out that has no message: one try, ``zmq.Again``."""
    with pytest.raises(zmq.Again):
        sock.recv(zmq.NOBLOCK)


def test_a_socket_left_with_messages_is_ready_again_without_a_new_edge(ctx):
    send, recv = pair(ctx, "edge")
    quiet_send, quiet = pair(ctx, "quiet")
    sockets = SocketSet()
    sockets.add(recv)
    sockets.add(quiet)
    assert len(sockets) == 2 and recv in sockets
    assert set(sockets.wait(0)) == {recv, quiet}  # just added: looked at once (messages may be queued already)
    read_nothing(recv)
    read_nothing(quiet)
    assert sockets.wait(0) == []
    for n in range(3):
        send.send(b"%d" % n)
    assert ready(sockets) == [recv]
    assert recv.recv(zmq.NOBLOCK) == b"0"  # one taken, two left: its descriptor will not be raised for them
    assert sockets.wait(0) == []
    sockets.again(recv)  # so the reader hands it back
    assert sockets.wait(0) == [recv]
    assert recv.recv(zmq.NOBLOCK) == b"1" and recv.recv(zmq.NOBLOCK) == b"2"
    assert not recv.getsockopt(zmq.EVENTS) & zmq.POLLIN  # all taken: the next message raises it again
    assert sockets.wait(0.05) == []
    send.send(b"3")
    assert ready(sockets) == [recv]
    assert recv.recv(zmq.NOBLOCK) == b"3"
    sockets.remove(recv)
    assert recv not in sockets and sockets.wait(0) == []
    quiet_send.send(b"q")
    assert ready(sockets) == [quiet]
    sockets.close()


def test_a_socket_added_with_messages_already_queued_is_ready(ctx):
    send, recv = pair(ctx, "queued")
    send.send(b"early")
    assert recv.poll(5000)  # it has crossed, and its edge (if any) came and went before the set was there to see it
    sockets = SocketSet()
    sockets.add(recv)
    assert sockets.wait(0) == [recv]
    assert recv.recv(zmq.NOBLOCK) == b"early"
    sockets.close()
