"""Receive and gather: the receiver thread, the relays, every rank's row (the rank store), the requests.

Everything here runs on the receiver's thread or under the aggregator's lock, and hands out copies only
(:class:`~ranktop.watch.engine.rank_store.JobView`). It judges nothing: it never imports ``analysis`` or
``model`` (tests/test_layering.py).
"""
