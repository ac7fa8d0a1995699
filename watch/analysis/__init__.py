"""Judge what the engine gathered: silence, stalls, the parallel layout and peer classes, straggler scores,
collectives, resources, stack groups, the history's episodes; and :class:`judge.Judge`, which makes a
:class:`~ranktop.watch.model.snapshot.Snapshot` of a view and owns the memory its verdicts keep, behind its
lock. Pure functions over arrays and frozen messages, and the judge's books: no socket, no terminal.
"""
