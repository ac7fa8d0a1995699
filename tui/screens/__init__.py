"""Screens pushed over the main one: help, stacks, capture."""
