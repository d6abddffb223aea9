"""Benchmarks: each `python -m bench.<name>` prints a table (see README.md)."""

from crawlflow.environment import confine_to_loopback

confine_to_loopback()  # benchmarks, like tests, reach loopback only
