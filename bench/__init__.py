"""Benchmarks: each `python -m bench.<name>` prints its tables and writes its result file
(bench/README.md indexes them; bench/harness.py is what they share)."""

import os

from runtime.environment import confine_to_loopback

confine_to_loopback()  # benchmarks, like tests, reach loopback only
# Plots go to files only (no display on servers and CI); set before any benchmark's module
# imports matplotlib.
os.environ["MPLBACKEND"] = "Agg"
