"""Receive and gather: the receiver thread, the relays, every rank's window and columns, the requests.

Everything here runs on the receiver's thread or under the aggregator's lock, and hands out copies only
(:class:`~ranktop.watch.engine.job_state.JobView`). It judges nothing: it never imports ``analysis`` or
``model`` (tests/test_layering.py).
"""
