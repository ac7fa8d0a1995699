"""The ``ranktop`` commands: one module per command, all built on :mod:`ranktop.watch`.

Nothing here draws a screen except through :mod:`ranktop.tui`, imported only
by the commands that open it, so every headless command runs without textual.
"""
