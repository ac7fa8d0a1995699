"""How the ends of the wire find and reach each other: rendezvous files, ports, IPC addresses, CURVE keys.

The wire (``ranktop.wire``) says what a message is; this package says where it goes. The probe,
the relay and the viewer all import it; it imports only the wire.
"""
