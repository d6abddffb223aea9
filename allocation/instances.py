"""Instance generators: reproducible allocation instances from a seed, for the benchmark
(bench/allocation.py) and the tests.

Node types are three cloud-like shapes (CPU-heavy, balanced, network-heavy) with prices whose
ratios follow reserved < on-demand pricing: usage adds about half the reservation, surcharge is
about 2.5x the reservation. Task demands are drawn independently per dimension, so that no single
dimension decides the packing and mixing types matters.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from allocation.model import Instance, NodeType, Resources, Task

# (name, cpu, memory_gb, bandwidth_mbps, reserved price)
SHAPES = (
    ("cpu16", 16.0, 32.0, 500.0, 1.0),
    ("bal8", 8.0, 32.0, 1000.0, 0.8),
    ("net4", 4.0, 16.0, 2000.0, 0.7),
)


def node_type(
    shape: tuple[str, float, float, float, float],
    max_reserved: int,
    max_surcharge: int | None = None,
) -> NodeType:
    name, cpu, mem, bw, reserved = shape
    return NodeType(
        name,
        Resources(cpu, mem, bw),
        reserved=reserved,
        usage=reserved / 2,
        surcharge=reserved * 2.5,
        max_reserved=max_reserved,
        max_surcharge=max_surcharge,
    )


def random_tasks(rng: random.Random, n: int) -> list[Task]:
    """Crawl-task-like demands: a host group needs 0.2-2 cores, 0.5-6 GB and 10-300 Mbps."""
    return [
        Task(
            f"t{i:03d}",
            Resources(
                round(rng.uniform(0.2, 2.0), 2),
                round(rng.uniform(0.5, 6.0), 2),
                round(rng.uniform(10.0, 300.0), 1),
            ),
        )
        for i in range(n)
    ]


def random_instance(rng: random.Random) -> Instance:
    """A small random instance: 10-40 tasks, 1-3 of the shapes, reservation caps that bind."""
    shapes = rng.sample(SHAPES, rng.randint(1, 3))
    tasks = random_tasks(rng, rng.randint(10, 40))
    return Instance(tuple(node_type(s, rng.randint(0, 8)) for s in shapes), tuple(tasks))


# --- instance families -----------------------------------------------------------------------
#
# A family fixes how demands are drawn, how tight the reservation caps are and how dear surcharge
# nodes are; each instance of it draws 2-5 node types of different sizes and prices, and its
# tasks, from a seed. Sizes and prices follow cloud-like shapes: 2-32 cores, 2-8 GB per core,
# 250-4000 Mbps, a reservation price roughly proportional to size with +-25% per type (so that
# types differ in value for money), usage 30-70% of the reservation.

DISTRIBUTIONS = ("uniform", "skewed", "correlated")
RESERVATIONS = ("tight", "loose")
SURCHARGES = ("cheap", "dear")


@dataclass(frozen=True)
class Family:
    distribution: str  # uniform: each dimension independently uniform; skewed: lognormal,
    # independent, many small tasks and a few large ones; correlated: one size per task scales
    # all three dimensions (+-20% each)
    reservation: str  # tight: max_reserved covers 10-35% of what a type alone would need;
    # loose: 60-120%
    surcharge: str  # cheap: 1.1-1.4x reserved + usage; dear: 2-3x

    @property
    def name(self) -> str:
        return f"{self.distribution}/{self.reservation}/{self.surcharge}"


FAMILIES = tuple(Family(d, r, s) for d in DISTRIBUTIONS for r in RESERVATIONS for s in SURCHARGES)


def family_instance(family: Family, seed: int, tasks: int | None = None) -> Instance:
    """An instance of the family: ``tasks`` tasks (default: 50-400 drawn from the seed)."""
    rng = random.Random(f"{family.name}/{seed}")
    count = tasks if tasks is not None else rng.randint(50, 400)
    shapes = []
    for _ in range(rng.randint(2, 5)):
        cpu = float(rng.choice((2, 4, 8, 16, 32)))
        memory = cpu * rng.choice((2.0, 4.0, 8.0))
        bandwidth = float(rng.choice((250, 500, 1000, 2000, 4000)))
        shapes.append((cpu, memory, bandwidth))
    # Demands are drawn relative to the largest shape, so every task fits it.
    reference = max(shapes, key=lambda s: s[0] / 32 + s[1] / 256 + s[2] / 4000)
    demands = [_demand(rng, family.distribution, reference) for _ in range(count)]
    total = [sum(d[k] for d in demands) for k in range(3)]
    node_types = []
    for k, (cpu, memory, bandwidth) in enumerate(shapes):
        reserved = round(
            (cpu / 16 + memory / 64 + bandwidth / 2000) / 3 * rng.uniform(0.75, 1.25), 3
        )
        usage = round(reserved * rng.uniform(0.3, 0.7), 3)
        factor = rng.uniform(1.1, 1.4) if family.surcharge == "cheap" else rng.uniform(2.0, 3.0)
        alone = max(t / c for t, c in zip(total, (cpu, memory, bandwidth), strict=True))
        share = rng.uniform(0.1, 0.35) if family.reservation == "tight" else rng.uniform(0.6, 1.2)
        node_types.append(
            NodeType(
                f"type{k}-{int(cpu)}c",
                Resources(cpu, memory, bandwidth),
                reserved=reserved,
                usage=usage,
                surcharge=round((reserved + usage) * factor, 3),
                max_reserved=max(1, round(share * alone)),
            )
        )
    tasks_ = [Task(f"t{i:03d}", Resources(*d)) for i, d in enumerate(demands)]
    return Instance(tuple(node_types), tuple(tasks_))


def _demand(
    rng: random.Random, distribution: str, reference: tuple[float, float, float]
) -> tuple[float, float, float]:
    if distribution == "uniform":
        shares = [rng.uniform(0.02, 0.3) for _ in range(3)]
    elif distribution == "skewed":
        shares = [min(0.8, rng.lognormvariate(math.log(0.06), 0.8)) for _ in range(3)]
    else:
        size = rng.uniform(0.02, 0.3)
        shares = [size * rng.uniform(0.8, 1.2) for _ in range(3)]
    return tuple(round(s * c, 3) for s, c in zip(shares, reference, strict=True))  # type: ignore[return-value]
