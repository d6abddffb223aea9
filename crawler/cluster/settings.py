"""The `[exchange]` and `[dedup]` settings: how nodes share URLs and servers, and the shared
URL filter (sections of the settings tree, `crawler.config`)."""

from __future__ import annotations

from pydantic import Field

from crawler.section import Section


class ExchangeSettings(Section):
    """`[exchange]`: how nodes share URLs and servers (docs/distributed.md;
    crawler/cluster/exchange.py). Each optimization can be switched off for comparison."""

    batch: int = Field(
        200, ge=1, description="URLs (or servers' worth) per call to shared state; 1: unbatched"
    )
    heartbeat_s: float = Field(0.5, gt=0, description="node status and send-buffer interval")
    throughput_window: int = Field(8, ge=2, description="heartbeats in the throughput window")
    balance: bool = Field(True, description="move servers between nodes by the water level")
    balance_tolerance: float = Field(
        0.25, ge=0, description="a node hands servers on above (1 + this) x its fair share"
    )
    shared_state_delay_s: float = Field(
        0.0, ge=0, description="added to every call to shared state (benchmarks: a far store)"
    )


class DedupSettings(Section):
    """`[dedup]`: the URLs seen by any node (crawler/cluster/dedup.py): a shared Bloom filter with
    an LRU cache in front of it on each node."""

    cache_size: int = Field(
        100_000, ge=0, description="LRU entries in front of the shared Bloom filter; 0: none"
    )
    expected_urls: int | None = Field(
        None,
        ge=1,
        description="Bloom filter capacity; default servers x [plan] expected_pages_per_host",
    )
    fp_rate: float = Field(1e-6, gt=0, lt=1, description="Bloom filter false positives")
    shards: int = Field(1, ge=1, le=64, description="Bloom filter actors")
