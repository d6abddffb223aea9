"""Allocate step: decide which crawler node owns which servers."""

from __future__ import annotations

from prefect import task

from crawler.seeds import CrawlScope


@task(name="allocate")
def allocate_hosts(scope: CrawlScope, nodes: int) -> list[list[str]]:
    """Whole servers per node, dealt round-robin so every node gets a share of the seeds."""
    assignment: list[list[str]] = [[] for _ in range(min(nodes, len(scope.hosts)))]
    for index, host in enumerate(scope.hosts):
        assignment[index % len(assignment)].append(host)
    return assignment
