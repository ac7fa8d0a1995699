"""A job after the fact, or from outside: the flight recorder's file, replaying it, the end-of-run report (text,
JSON, HTML) and the Prometheus exporter. Built on the same aggregator and snapshots as the live screen.
"""
