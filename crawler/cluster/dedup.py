"""Shared URL de-duplication across crawler nodes (docs/distributed.md): a Bloom filter in
shared state, sharded by URL, with a bounded LRU cache of answers on every node in front of it.

Who decides what, and what a false positive costs:

- A node decides alone, and exactly, for the servers it owns: it keeps the set of every URL of
  those servers it has seen (queued or done), and that set moves with a server when the server
  moves to another node. A node therefore never consults the shared filter about its own URLs,
  and a false positive can never make it drop one of them, nor can a URL be fetched twice.
- The shared filter only answers "has some node already sent this URL to its owner?", for the
  URLs nodes send to the exchange (`crawler.cluster.exchange`): those of servers the sender does not
  own, and only those its LRU cache does not know. "No" adds the URL, and the exchange passes
  it to the owner, who drops it if its exact set knows it (the filter saves traffic; it never
  judges a duplicate fetch).
- A false positive ("seen" for a URL nobody sent) means the URL is not passed on. As the filter
  gives the same answer to every node, it is lost unless its owner finds it through a link on
  one of its own servers: a false positive can at worst drop a page that only other servers
  link to, with probability `[dedup] fp_rate` per such URL. The URL still has its `discovered`
  row, so a resumed crawl (or a takeover) fetches it. With the default rate of 1e-6, a crawl
  of a million cross-server URLs expects to lose one.

The filter is sized for `expected_urls` items at `fp_rate`; past that many items the rate
rises fast (at the default rate, each 10% more items makes it about 3.7 times higher), so the
flow sizes it from the plan (servers x expected pages per server) unless told otherwise.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from cachetools import LRUCache
from rbloom import Bloom


class BloomShard:
    """One shard of the shared filter (a Ray actor in the flow: its calls are serialized)."""

    def __init__(self, expected_urls: int, fp_rate: float) -> None:
        self._bloom = Bloom(max(1, expected_urls), fp_rate)
        self.checked = 0
        self.added = 0

    def check_and_add(self, urls: Sequence[str]) -> list[bool]:
        """For each URL, True if it was not in the filter (and is now)."""
        bloom = self._bloom
        answers = []
        for url in urls:
            new = url not in bloom
            if new:
                bloom.add(url)
            answers.append(new)
        self.checked += len(urls)
        self.added += sum(answers)
        return answers

    def stats(self) -> dict[str, float]:
        return {
            "checked": self.checked,
            "added": self.added,
            "size_bits": self._bloom.size_in_bits,
        }


def shard_of(url: str, shards: int) -> int:
    """A shard every node computes alike (Python's str hash differs between processes)."""
    return zlib.crc32(url.encode()) % shards if shards > 1 else 0


def split_by_shard(urls: Sequence[str], shards: int) -> dict[int, list[int]]:
    """Indexes of `urls` per shard, for one remote call per shard."""
    parts: dict[int, list[int]] = {}
    for index, url in enumerate(urls):
        parts.setdefault(shard_of(url, shards), []).append(index)
    return parts


class SeenCache:
    """A node's bounded LRU of foreign URLs it has already handed to the shared filter.

    A hit means the URL was checked (and sent if it was new) before, so it is dropped with no
    remote call. A miss inserts it at once: the same URL found again before the filter has
    answered is not checked twice. Size 0 switches the cache off (every URL goes to the filter).
    Not thread-safe: the node calls it under its lock.
    """

    def __init__(self, size: int) -> None:
        self._cache: LRUCache[str, bool] | None = LRUCache(size) if size > 0 else None
        self.hits = 0
        self.misses = 0

    def admit(self, url: str) -> bool:
        """True if the URL must go to the shared filter."""
        cache = self._cache
        if cache is not None:
            if cache.get(url):  # `get` refreshes the entry's recency
                self.hits += 1
                return False
            cache[url] = True
        self.misses += 1
        return True
