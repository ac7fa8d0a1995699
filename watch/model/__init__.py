"""What a snapshot says: the frozen :class:`~ranktop.watch.model.snapshot.Snapshot`, its ranks as columns and
rows, the verdict line and the ``--json`` document. Every screen, command and export reads these; they
import the engine's records (a relay, a reply) and judge nothing.
"""
