"""What a node reports to the coordinator and its link: its levels and counters."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Counters:
    """A node's cumulative counts. `activity` moves with every change of what the node holds:
    the coordinator ends the crawl only once it stops moving."""

    fetches: int = 0
    pages: int = 0
    urls_done: int = 0
    activity: int = 0


@dataclass(frozen=True)
class NodeStatus:
    node_id: str
    queued: int  # URLs in its frontier: queued and waiting for a retry
    active: int  # connections open
    budget: int  # pages it may still start (crawler.node.core.UNLIMITED without --max-pages)
    # Work held for other nodes: servers on their way out, the link's buffers and calls.
    held_for_peers: int
    servers: int  # servers owned
    failure: str | None  # the first bug that killed one of its threads
    fetches: int
    pages: int
    urls_done: int
    activity: int
    link: dict[str, float]  # crawler.cluster.peerlink.PeerLink.stats
