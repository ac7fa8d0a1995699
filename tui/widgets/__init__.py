"""Widgets that render a Snapshot."""
