"""Judge what the engine gathered: silence, stalls, the parallel layout and peer classes, straggler scores,
collectives, resources, stack groups, the history's episodes; and :func:`judge.build`, which makes a
:class:`~ranktop.watch.model.snapshot.Snapshot` of a view. Pure functions over arrays and frozen messages:
no lock, no socket, no terminal.
"""
