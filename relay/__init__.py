"""The node's relay: one process per job per node that joins the node's ranks to any viewer.

- :mod:`.proxy`: the ZeroMQ proxies (telemetry out, signed commands in) and the node record;
- :mod:`.digest`: the thread that publishes the node digest for the viewers of big jobs;
- :mod:`.digest_fold`: what a node digest holds: its ranks' messages of one interval, folded;
- :mod:`.zap`: the CURVE gate on its TCP sockets;
- :mod:`.claim`: the node's claim folder, which makes one relay per job and node;
- :mod:`.process`: ``python -m ranktop.relay.process``, the relay as a process of its own;
- :mod:`.keeper`: the rank's side: starts the node's relay when none runs, and keeps it alive.

It imports the wire and the transport, never the probe's training-side code nor the viewer.
"""
