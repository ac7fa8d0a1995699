"""The receiver's socket set: a socket is ready while it has a message, whatever its descriptor's edges said."""

import time

import zmq

from ranktop.watch.engine.socket_set import SocketSet


def pair(ctx, name):
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    a.bind(f"inproc://{name}")
    b.connect(f"inproc://{name}")
    return a, b


def ready(sockets, timeout=0.2):
    """The sockets ready within ``timeout`` (a message crosses libzmq's pipes in a moment, not at once)."""
    end = time.monotonic() + timeout
    while True:
        found = sockets.wait(0.02)
        if found or time.monotonic() > end:
            return found


def test_a_socket_left_with_messages_is_ready_again_without_a_new_edge():
    ctx = zmq.Context()
    try:
        send, recv = pair(ctx, "edge")
        quiet_send, quiet = pair(ctx, "quiet")
        sockets = SocketSet()
        sockets.add(recv)
        sockets.add(quiet)
        assert sockets.wait(0) == [] and len(sockets) == 2 and recv in sockets
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
        sockets.remove(recv)
        assert recv not in sockets and sockets.wait(0) == []
        quiet_send.send(b"q")
        assert ready(sockets) == [quiet]
        sockets.close()
        for s in (send, recv, quiet_send, quiet):
            s.close(linger=0)
    finally:
        ctx.term()


def test_a_socket_added_with_messages_already_queued_is_ready():
    ctx = zmq.Context()
    try:
        send, recv = pair(ctx, "queued")
        send.send(b"early")
        time.sleep(0.05)
        sockets = SocketSet()
        sockets.add(recv)
        assert sockets.wait(0) == [recv]
        sockets.close()
        send.close(linger=0)
        recv.close(linger=0)
    finally:
        ctx.term()
