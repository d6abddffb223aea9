"""The in-process backend: nodes as plain objects whose threads run in this process, the
exchange and the Bloom filter shards as plain objects. What tests and benchmarks use; the
nodes, the routing and the coordinator are the same as on Ray."""

from __future__ import annotations

import threading
from typing import Any

from crawler.cluster.coordinator import NodeLost
from crawler.cluster.dedup import BloomShard
from crawler.cluster.exchange import Exchange
from crawler.cluster.peerlink import PeerLink
from crawler.node import CrawlerNode, NodeStatus
from runtime.fleet import Fleet, FleetPlan


class Serialized:
    """Calls one at a time, as the Ray actor holding the object takes them."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)

        def call(*args: Any) -> Any:
            with self._lock:
                return method(*args)

        return call


class LocalNode:
    """A node in this process, reached as the coordinator reaches a node actor: once killed,
    every call raises NodeLost."""

    def __init__(self, node: CrawlerNode) -> None:
        self.node = node
        self.node_id = node.node_id
        self.dead = False
        self.uncommitted: list[str] = []  # URLs of the fetches rows its death lost

    def kill(self) -> None:
        """What SIGKILL does to a node actor: it stops at once, its buffered rows are lost.
        Dead to the coordinator only once it has stopped: a killed actor commits nothing after
        its death is seen, so the recovery must not read the output while this one still
        commits its last batches."""
        self.node.halt()
        self.uncommitted = self.node.recorder.uncommitted_urls()
        self.dead = True

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.node, name)

        def call(*args: Any) -> Any:
            if self.dead:
                raise NodeLost(self.node_id)
            return method(*args)

        return call


class InProcessFleet(Fleet):
    def __init__(self, plan: FleetPlan) -> None:
        super().__init__(plan)
        config = plan.config
        self.shards = [
            BloomShard(plan.shard_capacity, config.dedup.fp_rate)
            for _ in range(config.dedup.shards)
        ]
        self.shared_exchange = Exchange(plan.owner, self.shards, config.exchange)
        self._exchange = Serialized(self.shared_exchange)
        self.launched: list[LocalNode] = []  # the planned nodes and every node added since
        self.nodes = [self._launch(node.node_id, node.hosts) for node in plan.nodes]

    @property
    def exchange(self) -> Any:
        return self._exchange

    def _launch(self, node_id: str, hosts: list[str]) -> LocalNode:
        config = self.plan.config
        link = PeerLink(config.exchange, config.dedup.cache_size, self._exchange)
        node = LocalNode(CrawlerNode(self.plan.node(node_id, hosts), link))
        self.launched.append(node)
        return node

    def add_node(self) -> LocalNode:
        return self._launch(f"node-{len(self.launched)}", [])

    def node(self, node_id: str) -> LocalNode:
        (found,) = [node for node in self.launched if node.node_id == node_id]
        return found

    def kill(self, node_id: str) -> None:
        self.node(node_id).kill()

    def stop(self) -> list[NodeStatus]:
        return [node.node.close() for node in self.launched if not node.dead]
