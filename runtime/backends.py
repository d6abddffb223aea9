"""The choice of backend: a fleet of Ray actors, or of plain objects in this process."""

from __future__ import annotations

from typing import Literal

from runtime.fleet import Fleet, FleetPlan

Backend = Literal["ray", "inprocess"]


def start_fleet(plan: FleetPlan, backend: Backend) -> Fleet:
    """The shared state and the planned nodes, built and linked, not fetching yet."""
    if backend == "ray":
        from runtime.ray_backend import RayFleet  # Ray is imported for a fleet of Ray actors only

        return RayFleet(plan)
    from runtime.inprocess import InProcessFleet

    return InProcessFleet(plan)
