"""The Ray backend: one actor per node, one for the exchange, one per Bloom filter shard; the
adapters through which the coordinator and the nodes reach them; starting Ray itself.

Ray imports this module in every actor process: it imports no Prefect (an actor starts without
a second of CPU spent importing a library it never uses), and the CLI can start Ray before it
has imported Prefect."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from runtime.environment import prepare_environment

# Before Ray is imported, by every way in: the CLI, a Prefect worker running the flow, tests.
prepare_environment()

import ray  # noqa: E402
from ray.actor import ActorHandle  # noqa: E402
from ray.exceptions import (  # noqa: E402
    ActorUnavailableError,
    GetTimeoutError,
    RayActorError,
)
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from crawler.cluster.coordinator import CrawlFailed, NodeLost  # noqa: E402
from crawler.cluster.dedup import BloomShard  # noqa: E402
from crawler.cluster.exchange import (  # noqa: E402
    Beat,
    Exchange,
    ExchangeSnapshot,
    ExchangeWithFilter,
    Reply,
)
from crawler.cluster.peerlink import PeerLink  # noqa: E402
from crawler.node import CrawlerNode, NodeSettings, NodeStatus  # noqa: E402
from crawler.scheduling.server import Item, ServerState  # noqa: E402
from runtime.fleet import Fleet, FleetPlan  # noqa: E402

if TYPE_CHECKING:
    from ray._private.node import Node

logger = logging.getLogger(__name__)

# A new Ray on this machine, never one a `ray start` left running (`prepare_environment` keeps
# it on loopback).
LOCAL_RAY: dict[str, Any] = {"address": "local", "include_dashboard": False, "log_to_driver": False}


# crawlflow's own packages, which a crawler node's process imports (the others, `bench` and
# `websim`, are for tests and benchmarks).
CODE_PACKAGES = (
    "crawlflow", "flows", "tasks", "runtime", "allocation", "crawler", "storage", "errors",
)  # fmt: skip
# What `ray job submit --runtime-env-json` gave the command (Ray's own variable).
RAY_JOB_CONFIG = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def ensure_ray() -> bool:
    """Join the cluster at RAY_ADDRESS, or start a local Ray, unless already connected.
    True when this call connected."""
    if ray.is_initialized():
        return False
    with _own_sigterm_handler():
        if address := os.environ.get("RAY_ADDRESS"):
            ray.init(address=address, log_to_driver=False, runtime_env=cluster_runtime_env())
        else:
            ray.init(**LOCAL_RAY)
    return True


def cluster_runtime_env() -> dict[str, Any] | None:
    """What the command gives the cluster's workers to run crawler nodes: this machine's copy
    of crawlflow's packages (Ray's `py_modules`: uploaded once per crawl, a megabyte, and put
    on every worker's path ahead of its installed packages), so that a worker machine runs the
    same code as the driver whatever it has installed. The libraries they import (the wheel's
    requirements, at constraints.txt's versions) must be on the worker machines, as Ray itself
    is: in their image, or through a `pip` runtime env (docs/cluster.md). None when the job
    that runs the command (`ray job submit`) already names the code, with `py_modules` or a
    `working_dir`: Ray refuses two values of one field."""
    job_env = json.loads(os.environ.get(RAY_JOB_CONFIG, "{}")).get("runtime_env") or {}
    if "py_modules" in job_env or "working_dir" in job_env:
        return None
    paths = []
    for name in CODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.submodule_search_locations, name
        paths.extend(spec.submodule_search_locations)
    return {"py_modules": paths}


@contextmanager
def _own_sigterm_handler() -> Iterator[None]:
    """Keep the process's SIGTERM handler: `ray.init` replaces it with an immediate exit, which
    would end the command without a word, and without the crawl's flow run recording its end."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGTERM) if in_main_thread else None
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def stop_local_ray() -> None:
    """Shut down the local Ray `ensure_ray` started. Its autoscaler monitor goes first (it
    holds nothing a one-machine crawl needs): `ray.shutdown` would stop it after the GCS, and a
    monitor told to stop then reports its end to the GCS it lost until Ray kills it a second
    later, a second of the command's exit (Ray 2.60: 1.6 s in all, 0.35 s this way)."""
    # Ray declares it None; `ray.init` sets it.
    node: Node | None = ray._private.worker._global_node
    try:
        if node is not None and node.is_head():
            node.kill_monitor(check_alive=False)  # Ray's internal API: it may change
    finally:
        ray.shutdown()


class CommandRay:
    """The local Ray a command started for its crawl (crawlflow/boot.py). It is stopped in
    the background as soon as the first fleet launched on it has stopped: the flow then only
    compacts its output and reports, which need no Ray, and the shutdown (a third of a second)
    runs beside them; or when the command leaves it without having launched a fleet. The
    shutdown thread is not a daemon: the process waits for it before it exits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = False  # started by the command, not stopped yet
        self._claimed = False  # a fleet will stop it

    def hold(self) -> None:
        """The command started a local Ray (`ensure_ray`) for its crawl."""
        with self._lock:
            self._held, self._claimed = True, False

    def claim(self) -> bool:
        """True for the first fleet launched on the command's Ray: that fleet stops it."""
        with self._lock:
            claimed = self._held and not self._claimed
            self._claimed = self._claimed or claimed
            return claimed

    def release(self) -> None:
        """Stop the command's Ray in the background, once."""
        with self._lock:
            if not self._held:
                return
            self._held = False
        threading.Thread(target=stop_local_ray, name="ray-shutdown").start()


COMMAND_RAY = CommandRay()


class RayExchange:
    """The exchange actor, for the nodes (ExchangeHandle) and the coordinator (ExchangeView).
    A node's adapter is built with the node and given the actor later (see RayFleet)."""

    def __init__(self, actor: Any = None) -> None:
        self.actor = actor

    def heartbeat(self, beat: Beat) -> Reply:
        return ray.get(self.actor.heartbeat.remote(beat))

    def push(self, urls: list[Item]) -> int:
        return ray.get(self.actor.push.remote(urls))

    def pull(self, node_id: str, max_items: int) -> Reply:
        return ray.get(self.actor.pull.remote(node_id, max_items))

    def offer(self, node_id: str, states: list[ServerState]) -> None:
        ray.get(self.actor.offer.remote(node_id, states))

    def snapshot(self) -> ExchangeSnapshot:
        return ray.get(self.actor.snapshot.remote())

    def orphan(self, node_id: str) -> list[str]:
        return ray.get(self.actor.orphan.remote(node_id))

    def put_hosts(self, states: list[ServerState]) -> None:
        ray.get(self.actor.put_hosts.remote(states))


class RayFilterShard:
    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def check_and_add(self, urls: list[str]) -> list[bool]:
        return ray.get(self.actor.check_and_add.remote(urls))


def one_core_each(nodes: int) -> bool:
    """Whether each crawler node's process keeps to one core: when the Ray cluster is this one
    machine and it has no more cores than the crawl has nodes. A node's threads share one GIL;
    spread over several cores, each time one of them releases it (a socket read, gzip, numpy)
    another core's thread waits for it through the kernel, about a fifth of a busy node's CPU
    on two cores. On one core the handover is a plain switch: with two nodes on two cores, the
    crawl of bench/cpu_per_page took 5-11% less CPU and 15-20% less time
    (bench/results/cpu_per_page/NOTES.md). With cores to spare, a node keeps them for the C
    work that runs beside its Python (gzip, Parquet, lxml's parse)."""
    machines = sum(1 for machine in ray.nodes() if machine["Alive"])
    return machines == 1 and nodes >= len(os.sched_getaffinity(0))


def keep_to_one_core(index: int) -> None:
    """Every thread of this process, and those they start, on the `index`-th core it may use
    (modulo their number): node i on core i, so that no two nodes share one while another is
    free. A thread that ends meanwhile is skipped."""
    cores = sorted(os.sched_getaffinity(0))
    core = cores[index % len(cores)]
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(int(thread), {core})


class LinkedCrawlerNode(CrawlerNode):
    """The node actor. Its link to the shared state is built here, in the actor's process:
    a link holds a thread and locks, which do not travel. The link reaches the exchange actor
    once `connect` has named it, before the node starts: the link calls it only from then."""

    def __init__(self, settings: NodeSettings, core: int | None = None) -> None:
        if core is not None:
            keep_to_one_core(core)
        config = settings.config
        self.shared_exchange = RayExchange()
        link = PeerLink(config.exchange, config.dedup.cache_size, self.shared_exchange)
        super().__init__(settings, link)

    def connect(self, exchange: Any) -> None:
        self.shared_exchange.actor = exchange

    def placement(self) -> dict[str, str]:
        """Where this node runs: its Ray node (raylet) id and that node's address."""
        return {
            "ray_node_id": ray.get_runtime_context().get_node_id(),
            "ray_node_ip": ray.util.get_node_ip_address(),
        }


# A call to a node that has not answered after this long is logged, then waited for again.
NODE_CALL_CHECK_S = 10.0
# A node that stops answering (its machine lost, cut off, or stuck) is killed, so that it can
# commit nothing more, and its servers are taken over once Ray confirms its end. Ray ends the
# calls to a lost machine's actors itself: first as unreachable (ActorUnavailableError, within
# seconds), at the latest once the machine misses its health checks (about 15 s with Ray's
# defaults). A call unanswered for this long, and no error, is a stuck node.
NODE_SILENT_S = 300.0
# How long Ray may take to confirm that a node it was told to kill is gone.
NODE_KILL_WAIT_S = 120.0


class RayNode:
    """A crawler node actor seen through the coordinator's node interface; where it runs
    (`placement`) once it has started."""

    def __init__(self, node_id: str, actor: Any) -> None:
        self.node_id = node_id
        self.actor = actor
        self.placement: dict[str, str] = {}

    def _get(self, ref: Any) -> Any:
        """The call's answer; NodeLost once the node is gone, never a call hanging on a lost
        machine."""
        silent_s = 0.0
        while True:
            try:
                return ray.get(ref, timeout=NODE_CALL_CHECK_S)
            except ActorUnavailableError:
                self._fence("unreachable")
            except RayActorError:
                raise NodeLost(self.node_id) from None
            except GetTimeoutError:
                silent_s += NODE_CALL_CHECK_S
                if silent_s >= NODE_SILENT_S:
                    self._fence(f"silent for {silent_s:.0f} s")
                logger.warning(
                    "crawler node %s (%s) has not answered for %.0f s",
                    self.node_id,
                    self.where,
                    silent_s,
                )

    @property
    def where(self) -> str:
        return self.placement.get("ray_node_ip", "not placed yet")

    def _fence(self, why: str) -> NoReturn:
        """Whether the node ran the call is unknown: it is killed, and lost once Ray confirms
        it is gone (its servers then go to the others, rebuilt from what it committed). A
        node that came back would otherwise fetch beside the nodes that took its servers."""
        logger.warning("crawler node %s (%s) is %s: stopping it", self.node_id, self.where, why)
        ray.kill(self.actor, no_restart=True)
        deadline = time.monotonic() + NODE_KILL_WAIT_S
        while time.monotonic() < deadline:
            try:
                ray.get(self.actor.status.remote(), timeout=NODE_CALL_CHECK_S)
            except (ActorUnavailableError, GetTimeoutError):
                pass
            except RayActorError:
                raise NodeLost(self.node_id) from None
            time.sleep(0.5)
        raise CrawlFailed(
            f"crawler node {self.node_id} ({self.where}) is {why} and Ray has not confirmed"
            f" its end in {NODE_KILL_WAIT_S:.0f} s"
        )

    def add_urls(self, items: list[Item]) -> int:
        return self._get(self.actor.add_urls.remote(items))

    def status(self) -> NodeStatus:
        return self._get(self.actor.status.remote())

    def grant(self, pages: int) -> None:
        self._get(self.actor.grant.remote(pages))

    def reclaim(self) -> int:
        return self._get(self.actor.reclaim.remote())

    def restore(
        self, pending: list[tuple[str, int, int]], done: list[str], admitted: list[str]
    ) -> None:
        self._get(self.actor.restore.remote(pending, done, admitted))

    def flush(self) -> None:
        self._get(self.actor.flush.remote())

    def start(self) -> None:
        self._get(self.actor.start.remote())

    def expire(self) -> int:
        return self._get(self.actor.expire.remote())

    def connect(self, exchange: Any) -> None:
        """Give the node the exchange actor; waited for: the actor takes calls on several
        threads, in no set order, and the coordinator starts it next."""
        self._get(self.actor.connect.remote(exchange))


class RayFleet(Fleet):
    """Started with Ray (local, or the cluster at RAY_ADDRESS): the shared state, then the
    planned nodes, each actor with its node type's size."""

    def __init__(self, plan: FleetPlan) -> None:
        super().__init__(plan)
        ensure_ray()
        self.stops_ray = COMMAND_RAY.claim()
        config = plan.config
        self.launched: list[RayNode] = []  # the planned nodes and every node added since
        self._one_core_each = one_core_each(len(plan.nodes))
        resources = ray.cluster_resources()
        # Each actor gets its node type's size, scaled down when the plan holds more nodes
        # than the cluster has room for (surcharge nodes on one machine): Ray would never
        # start them.
        cpus = sum(node.num_cpus for node in plan.nodes)
        memory = sum(node.memory_gb * 1e9 for node in plan.nodes)
        cpu_scale = min(1.0, resources.get("CPU", 1.0) / cpus) if cpus else 1.0
        memory_scale = min(1.0, resources.get("memory", 1e9) / memory) if memory else 1.0
        self.nodes = [
            self._launch(
                node.node_id,
                node.hosts,
                node.num_cpus * cpu_scale,
                int(node.memory_gb * 1e9 * memory_scale),
            )
            for node in plan.nodes
        ]
        # The nodes are created, and waited for, before the shared state: Ray gives actors the
        # worker processes it started with it (one per CPU, Python and Ray loaded) in the order
        # they are created, and a node's start (importing the crawler, a quarter of a second)
        # is what the crawl waits for. The shared state, small and mostly waiting, starts
        # beside the crawl's first requests; the nodes' calls to it wait until it is up.
        self._place(self.launched)
        # No CPU is reserved for the shared state. It runs on the driver's machine: the crawl
        # cannot go on without the driver, and losing any other machine loses only nodes,
        # whose servers the others take over.
        beside_driver = NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False
        )
        shared = {"num_cpus": 0, "scheduling_strategy": beside_driver}
        self.shards: list[Any] = []
        self.exchange_actor: Any
        if config.dedup.shards == 1:
            self.exchange_actor = (
                ray.remote(ExchangeWithFilter)
                .options(**shared)
                .remote(plan.owner, plan.shard_capacity, config.dedup.fp_rate, config.exchange)
            )
        else:
            self.shards = [
                ray.remote(BloomShard)
                .options(**shared)
                .remote(plan.shard_capacity, config.dedup.fp_rate)
                for _ in range(config.dedup.shards)
            ]
            self.exchange_actor = (
                ray.remote(Exchange)
                .options(**shared)
                .remote(
                    plan.owner,
                    shards=[RayFilterShard(shard) for shard in self.shards],
                    settings=config.exchange,
                )
            )
        self._exchange = RayExchange(self.exchange_actor)
        # Connected before the coordinator starts them (see RayNode.connect), all at once.
        ray.get([node.actor.connect.remote(self.exchange_actor) for node in self.launched])

    @property
    def exchange(self) -> RayExchange:
        return self._exchange

    def _place(self, nodes: list[RayNode]) -> None:
        """Wait for `nodes` to start, and note where each runs."""
        for node, placement in zip(
            nodes, ray.get([node.actor.placement.remote() for node in nodes]), strict=True
        ):
            node.placement = placement

    def placements(self) -> dict[str, dict[str, str]]:
        return {node.node_id: node.placement for node in self.launched}

    def _launch(self, node_id: str, hosts: list[str], num_cpus: float, memory: int) -> RayNode:
        plan = self.plan
        actor = (
            ray.remote(LinkedCrawlerNode)
            .options(
                num_cpus=num_cpus,
                memory=memory,
                max_concurrency=4,
                name=f"{plan.crawl_id}-{node_id}",
                # One node per machine before two on any, where their CPUs allow: a cluster's
                # nodes then share out its network and its machines' failures.
                scheduling_strategy="SPREAD",
            )
            .remote(plan.node(node_id, hosts), len(self.launched) if self._one_core_each else None)
        )
        node = RayNode(node_id, actor)
        self.launched.append(node)
        return node

    def add_node(self) -> RayNode:
        """It asks for what is left of the cluster's CPU (on one machine, it shares the
        cores)."""
        free = ray.available_resources().get("CPU", 0.0)
        node = self._launch(f"node-{len(self.launched)}", [], max(0.01, min(1.0, free)), 0)
        self._place([node])
        node.connect(self.exchange_actor)
        return node

    def stop(self) -> list[NodeStatus]:
        statuses = []
        for node in self.launched:
            try:
                statuses.append(ray.get(node.actor.close.remote()))
            except RayActorError:
                continue  # died during the crawl: its servers were taken over
            ray.kill(node.actor)
        for actor in [self.exchange_actor, *self.shards]:
            # Ray types what `.remote()` returns as a handle or the class (for method lookup).
            assert isinstance(actor, ActorHandle)
            ray.kill(actor)
        if self.stops_ray:
            COMMAND_RAY.release()
        return statuses
