"""The choice of backend: a fleet of Ray actors, or of plain objects in this process."""

from __future__ import annotations

from collections.abc import Mapping
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


def crawl_in_process(
    plan: FleetPlan,
    seeds: list[str],
    depths: Mapping[str, int] | None = None,
    poll_s: float = 0.02,
) -> Fleet:
    """Crawl the plan from `seeds` to its end on the in-process backend, then stop the fleet
    (also when the crawl fails): the whole crawl of a test or benchmark in one call. Returns
    the stopped fleet, whose nodes can still be inspected."""
    fleet = start_fleet(plan, "inprocess")
    try:
        coordinator = fleet.coordinator()
        coordinator.seed(seeds, depths)
        coordinator.run(poll_s=poll_s)
    finally:
        fleet.stop()
    return fleet
