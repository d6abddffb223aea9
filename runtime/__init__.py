"""The runtime layer: builds a fleet of crawler nodes from the plan, in Ray actors
(runtime/ray_backend.py) or in this process (runtime/inprocess.py), behind one interface
(runtime/fleet.py). Prefect tasks, tests and benchmarks reach Ray only through it."""

from __future__ import annotations

from typing import Literal

from runtime.fleet import Fleet, FleetPlan, LoneNode, PlannedNode, single_node

Backend = Literal["ray", "inprocess"]

__all__ = ["Backend", "Fleet", "FleetPlan", "LoneNode", "PlannedNode", "single_node", "start_fleet"]


def start_fleet(plan: FleetPlan, backend: Backend) -> Fleet:
    """The shared state and the planned nodes, built and linked, not fetching yet."""
    if backend == "ray":
        from runtime.ray_backend import RayFleet  # Ray only for a fleet of Ray actors

        return RayFleet(plan)
    from runtime.inprocess import InProcessFleet

    return InProcessFleet(plan)
