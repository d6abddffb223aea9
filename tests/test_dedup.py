"""The shared Bloom filter shards and the node's LRU cache in front of them
(crawler/cluster/dedup.py)."""

from __future__ import annotations

from crawler.cluster.dedup import BloomShard, SeenCache, shard_of, split_by_shard


def test_check_and_add_answers_new_once_even_within_one_batch():
    shard = BloomShard(expected_urls=1000, fp_rate=1e-6)
    assert shard.check_and_add(["http://a/1", "http://a/2", "http://a/1"]) == [True, True, False]
    assert shard.check_and_add(["http://a/2", "http://a/3"]) == [False, True]
    assert shard.stats()["added"] == 3


def test_false_positive_rate_holds_at_the_sized_capacity():
    shard = BloomShard(expected_urls=20_000, fp_rate=0.01)
    shard.check_and_add([f"http://a/{i}" for i in range(19_000)])
    # Checking adds too: the 2,000 URLs checked take the filter from 5% below its capacity to
    # 5% above, so on average they meet it exactly at capacity: about 20 false positives
    # expected (1%), 40 is 4.4 standard deviations away. (The hash is Python's, seeded anew
    # in every process, so the count differs from run to run.)
    false_positives = shard.check_and_add([f"http://b/{i}" for i in range(2_000)]).count(False)
    assert false_positives / 2_000 < 0.02


def test_shards_are_stable_and_cover_every_url():
    urls = [f"http://h{i % 7}/p{i}" for i in range(500)]
    assert [shard_of(u, 4) for u in urls] == [shard_of(u, 4) for u in urls]
    parts = split_by_shard(urls, 4)
    assert sorted(i for indexes in parts.values() for i in indexes) == list(range(500))
    assert set(parts) == {0, 1, 2, 3}
    assert split_by_shard(urls, 1) == {0: list(range(500))}


def test_seen_cache_answers_locally_and_is_bounded():
    cache = SeenCache(size=2)
    assert cache.admit("a") and cache.admit("b")
    assert not cache.admit("a")  # a hit, and "a" becomes the most recent
    assert cache.admit("c")  # evicts "b", the least recently used
    assert not cache.admit("a")
    assert cache.admit("b")
    assert (cache.hits, cache.misses) == (2, 4)


def test_seen_cache_of_size_zero_is_off():
    cache = SeenCache(size=0)
    assert all(cache.admit("a") for _ in range(3))
    assert cache.hits == 0
