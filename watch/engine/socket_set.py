"""The sockets the receiver waits on, registered once, and a wait that costs what is ready, not what is watched.

``zmq.Poller.poll`` hands libzmq the whole list of sockets on every call, and
libzmq asks each one for its state: at 2,048 relays (16,384 ranks), each with
a monitor, the receiver's polls alone cost a tenth of a core, most of it for
sockets with nothing to say. Here each socket's file descriptor
(``zmq.FD``) is registered once with the kernel (epoll where there is one,
poll elsewhere), so a wait returns only the sockets whose state may have
changed, and each of those is asked once.

``zmq.FD`` says "look at the socket", not "a message is here", and it is
edge-triggered: it is not raised again for messages that arrive while others
wait unread. So a wait hands out the sockets that *may* have a message, and
their reader tries each without blocking (a try that finds none raises
``zmq.Again``, which is rare: the descriptor is raised almost only by messages);
it either takes all the socket has (stopping when ``zmq.EVENTS`` says no more,
which re-arms the descriptor) or hands it back with :meth:`SocketSet.again`, to
be looked at in the next wait without the descriptor's word. A socket just
added is looked at once too: messages may be queued before it was registered.
The wait asks no socket its ``EVENTS`` first: the reader's first ``recv`` does
what that asking did (libzmq reads the socket's commands), and at 2,048
digests a second the asking alone was a point of a core (benchmarks/scale.py).
"""

from __future__ import annotations

import select
from typing import Any, cast

import zmq

Socket = zmq.Socket[Any]

#: ``zmq.EVENTS`` and its ``POLLIN`` bit as plain ints: pyzmq's are enums, and an int ``&`` an enum flag makes a new
#: enum member in Python (about a microsecond, twice for every message a viewer of 2,048 relays takes).
EVENTS = int(zmq.EVENTS)
POLLIN = int(zmq.POLLIN)


class SocketSet:
    def __init__(self) -> None:
        self._epoll = hasattr(select, "epoll")
        self._poll: Any = select.epoll() if self._epoll else select.poll()
        self._by_fd: dict[int, Socket] = {}
        self._fd_of: dict[Socket, int] = {}
        self._again: set[Socket] = set()

    def __len__(self) -> int:
        return len(self._fd_of)

    def __contains__(self, sock: object) -> bool:
        return sock in self._fd_of

    def add(self, sock: Socket) -> None:
        fd = cast(int, sock.getsockopt(zmq.FD))
        self._poll.register(fd, select.POLLIN)
        self._by_fd[fd] = sock
        self._fd_of[sock] = fd
        self._again.add(sock)  # (messages queued before it was registered raised no edge here)

    def remove(self, sock: Socket) -> None:
        """Before the socket is closed (its descriptor may be reused by the next socket made)."""
        fd = self._fd_of.pop(sock, None)
        if fd is None:
            return
        self._by_fd.pop(fd, None)
        self._again.discard(sock)
        try:
            self._poll.unregister(fd)
        except (KeyError, OSError, ValueError):
            pass

    def again(self, sock: Socket) -> None:
        """``sock`` still has messages its reader left for later: it is ready in the next wait."""
        if sock in self._fd_of:
            self._again.add(sock)

    def wait(self, timeout_s: float) -> list[Socket]:
        """The sockets that may have a message to read (their descriptor was raised, or they were handed back or
        just added), waiting up to ``timeout_s`` for any descriptor to be raised (not at all when some socket was
        handed back or just added). Their reader tries each without blocking."""
        timeout = 0.0 if self._again else timeout_s
        events = self._poll.poll(timeout if self._epoll else int(timeout * 1000))
        looked, self._again = self._again, set()
        for fd, _ in events:
            sock = self._by_fd.get(fd)
            if sock is not None:
                looked.add(sock)
        return list(looked)

    def close(self) -> None:
        self._poll.close() if self._epoll else None
        self._by_fd.clear()
        self._fd_of.clear()
        self._again.clear()
