"""Receive and gather: the receiver thread, the relays, every rank's row (the rank store), the requests.

Everything here runs on the receiver's thread or under the aggregator's lock, and hands out copies only
(:class:`~ranktop.watch.engine.rank_store.JobView`) and the model's records (``ranktop.watch.model``, the floor it
may import). It keeps facts and judges nothing (no creep, no lost relay, no words for the screen): it never
imports ``analysis`` (tests/test_layering.py).
"""
