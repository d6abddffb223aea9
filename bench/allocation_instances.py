"""Instance generators for the allocation benchmark.

Node types are three cloud-like shapes (CPU-heavy, balanced, network-heavy) with prices whose
ratios follow reserved < on-demand pricing: usage adds about half the reservation, surcharge is
about 2.5x the reservation. Task demands are drawn independently per dimension, so that no single
dimension decides the packing and mixing types matters.
"""

from __future__ import annotations

import random

from allocation.model import Instance, NodeType, Resources, Task

# (name, cpu, memory_gb, bandwidth_mbps, reserved price)
SHAPES = (
    ("cpu16", 16.0, 32.0, 500.0, 1.0),
    ("bal8", 8.0, 32.0, 1000.0, 0.8),
    ("net4", 4.0, 16.0, 2000.0, 0.7),
)


def node_type(shape: tuple[str, float, float, float, float], max_reserved: int,
              max_surcharge: int | None = None) -> NodeType:
    name, cpu, mem, bw, reserved = shape
    return NodeType(name, Resources(cpu, mem, bw), reserved=reserved, usage=reserved / 2,
                    surcharge=reserved * 2.5, max_reserved=max_reserved,
                    max_surcharge=max_surcharge)


def random_tasks(rng: random.Random, n: int) -> list[Task]:
    """Crawl-task-like demands: a host group needs 0.2-2 cores, 0.5-6 GB and 10-300 Mbps."""
    return [
        Task(f"t{i:03d}", Resources(round(rng.uniform(0.2, 2.0), 2),
                                    round(rng.uniform(0.5, 6.0), 2),
                                    round(rng.uniform(10.0, 300.0), 1)))
        for i in range(n)
    ]


def goal_instance(seed: int = 0) -> Instance:
    """The goal: 200 tasks, 3 node types, up to 30 reserved nodes of each."""
    rng = random.Random(seed)
    return Instance(tuple(node_type(s, 30) for s in SHAPES), tuple(random_tasks(rng, 200)))


def correlated_instance(seed: int = 0) -> Instance:
    """Like goal_instance, but each task's three demands scale with one size (a host group's
    crawl rate), each jittered by up to 30%: bins then tend to be full in two dimensions at once,
    which is harder to pack than independent demands."""
    rng = random.Random(seed)
    tasks = []
    for i in range(200):
        size = rng.uniform(0.1, 1.0)
        cpu, mem, bw = (size * unit * rng.uniform(0.7, 1.3) for unit in (2.0, 6.0, 300.0))
        tasks.append(Task(f"t{i:03d}", Resources(round(cpu, 2), round(mem, 2), round(bw, 1))))
    return Instance(tuple(node_type(s, 30) for s in SHAPES), tuple(tasks))


def random_instance(rng: random.Random) -> Instance:
    """A small random instance: 10-40 tasks, 1-3 of the shapes, reservation caps that bind."""
    shapes = rng.sample(SHAPES, rng.randint(1, 3))
    tasks = random_tasks(rng, rng.randint(10, 40))
    return Instance(tuple(node_type(s, rng.randint(0, 8)) for s in shapes), tuple(tasks))
