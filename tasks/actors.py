"""The Ray side of the launch step that needs no Prefect: starting Ray, and what runs inside
the actors (the node actor and its link to the shared state). Ray imports this module in every
actor process: without Prefect, an actor starts without a second of CPU spent importing a
library it never uses, and the CLI can start Ray before it has imported Prefect."""

from __future__ import annotations

import os
from typing import Any

from tasks.environment import prepare_environment

# Before Ray is imported, by every way in: the CLI, a Prefect worker running the flow, tests.
prepare_environment()

import ray  # noqa: E402

from crawler.exchange import Beat, Reply  # noqa: E402
from crawler.node import CrawlerNode  # noqa: E402
from crawler.peerlink import PeerLink, link_settings  # noqa: E402
from crawler.server import Item, ServerState  # noqa: E402


class RayExchange:
    """The exchange actor, for the nodes (ExchangeHandle) and the coordinator (ExchangeView)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def heartbeat(self, beat: Beat) -> Reply:
        return ray.get(self.actor.heartbeat.remote(beat))

    def push(self, node_id: str, urls: list[Item]) -> int:
        return ray.get(self.actor.push.remote(node_id, urls))

    def pull(self, node_id: str, max_items: int) -> Reply:
        return ray.get(self.actor.pull.remote(node_id, max_items))

    def offer(self, node_id: str, states: list[ServerState]) -> None:
        ray.get(self.actor.offer.remote(node_id, states))

    def snapshot(self) -> dict[str, Any]:
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


class LinkedCrawlerNode(CrawlerNode):
    """The node actor. Its link to the shared state is built here, in the actor's process:
    a link holds a thread and locks, which do not travel."""

    def __init__(self, exchange: Any, **kwargs: Any) -> None:
        link = PeerLink(link_settings(kwargs["config"]), RayExchange(exchange))
        super().__init__(**kwargs, link=link)


# A new Ray on this machine, never one a `ray start` left running (`prepare_environment` keeps
# it on loopback).
LOCAL_RAY: dict[str, Any] = {"address": "local", "include_dashboard": False, "log_to_driver": False}


def ensure_ray() -> bool:
    """Join the cluster at RAY_ADDRESS, or start a local Ray, unless already connected.
    True when this call connected."""
    if ray.is_initialized():
        return False
    if address := os.environ.get("RAY_ADDRESS"):
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(**LOCAL_RAY)
    return True
