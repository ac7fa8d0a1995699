"""What a snapshot says: the floor of watch. The frozen :class:`~ranktop.watch.model.snapshot.Snapshot`, its ranks as
columns and rows, the relays (:mod:`endpoint`), the answers to commands (:mod:`answers`), the job's life
(:mod:`life`), a stall (:mod:`stall`), the verdict line and the ``--json`` document. The engine and the analysis
produce into these records; every screen, command and export reads them. Nothing here imports another room of
watch (tests/test_layering.py); it says what the analysis found and judges nothing the engine gathered.
"""
