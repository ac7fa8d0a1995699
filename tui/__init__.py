"""ranktop's Textual app: renders :class:`ranktop.watch.Snapshot` objects. Only this package imports textual.

``app.py`` (the App), ``bindings.py`` (the one key table), ``ranktop.tcss``,
``panes/`` (the main screen's areas), ``screens/`` (help, stacks, capture),
``render/`` (colours, lazily drawn lines). Never imports torch.
"""
