"""Connection statistics, P(s,i), T(s,i) and the four server rankings (docs/scheduling.md)."""

from __future__ import annotations

import pytest

from crawler.config import ConfigError, config_from_dict
from crawler.scheduling.policies import (
    POLICIES,
    POLICY_CLASSES,
    ConnectionStats,
    StatsPrior,
    make_policy,
)

KEEP = {"connection": "keep-alive"}
CLOSE = {"connection": "close"}


def keep_alive(remaining: int) -> dict[str, str]:
    return {"connection": "keep-alive", "keep-alive": f"timeout=5, max={remaining}"}


def stats(rpc: int = 50, prior: StatsPrior | None = None) -> ConnectionStats:
    return ConnectionStats(prior or StatsPrior(), rpc, keepalive_speedup=1.2, weight=0.8)


def test_requests_per_connection_from_keep_alive_max():
    s = stats()
    s.on_response(200, 0.01, keep_alive(99))  # first request: 1 made + 99 left
    assert s.requests_per_connection == 100
    s.on_response(200, 0.01, keep_alive(98))
    assert s.requests_per_connection == 100


def test_requests_per_connection_from_connection_close():
    s = stats()
    s.on_response(200, 0.01, CLOSE)
    assert s.requests_per_connection == 1
    for _ in range(9):
        s.on_response(200, 0.01, KEEP)
    s.on_response(200, 0.01, CLOSE)  # the tenth request on that connection was the last
    assert s.requests_per_connection == 10


def test_without_either_header_the_server_allowed_at_least_what_was_made():
    s = stats(rpc=2)
    for _ in range(3):
        s.on_response(200, 0.01, KEEP)
    assert s.requests_per_connection == 3


def test_a_failed_request_ends_the_connection_but_teaches_no_allowance():
    s = stats()
    s.on_response(200, 0.01, keep_alive(9))
    s.on_response(None, None, {})
    assert s.requests_per_connection == 10
    s.on_response(200, 0.05, keep_alive(9))  # fresh again: 1 made + 9 left
    assert s.requests_per_connection == 10


def test_response_time_is_smoothed_with_weight_08_and_starts_at_the_first_sample():
    s = stats()
    s.on_response(200, 0.030, keep_alive(99))  # fresh, no reuse sample yet: all response time
    assert s.response_time == pytest.approx(0.030)
    s.on_response(200, 0.010, keep_alive(98))  # reused connection: a response time sample
    assert s.response_time == pytest.approx(0.8 * 0.030 + 0.2 * 0.010)
    assert s.connection_time is None


def test_connection_time_is_a_fresh_request_minus_the_response_time():
    s = stats()
    s.on_response(200, 0.012, KEEP)
    s.on_response(200, 0.010, KEEP)
    s.on_response(200, 0.010, CLOSE)
    r = s.response_time
    s.on_response(200, 0.050, KEEP)  # new connection
    assert s.connection_time == pytest.approx(0.050 - r)
    s.on_response(200, 0.010, CLOSE)
    s.on_response(200, 0.030, KEEP)
    assert s.connection_time == pytest.approx(0.8 * (0.050 - r) + 0.2 * (0.030 - s.response_time))


def test_a_server_that_closes_every_time_takes_the_node_mean_connection_time():
    prior = StatsPrior()
    known = stats(prior=prior)
    known.on_response(200, 0.010, KEEP)
    known.on_response(200, 0.010, CLOSE)
    known.on_response(200, 0.030, CLOSE)  # fresh: 0.020 of connect
    assert prior.connection_time.value == pytest.approx(0.020)
    closer = stats(prior=prior)
    closer.on_response(200, 0.100, CLOSE)
    assert closer.connection_time is None
    assert closer.response_time == pytest.approx(0.080)


def test_refusals_and_errors_are_not_time_samples():
    s = stats()
    s.on_response(200, 0.05, keep_alive(99))
    s.on_response(429, 0.0001, keep_alive(98))
    s.on_response(503, 0.0001, keep_alive(97))
    assert s.response_time == pytest.approx(0.05)
    assert s.requests_per_connection == 100  # they still count on the connection


def test_unmeasured_servers_use_the_mean_of_the_measured_ones():
    prior = StatsPrior()
    fast, slow, new = stats(prior=prior), stats(prior=prior), stats(prior=prior)
    fast.on_response(200, 0.010, KEEP)
    slow.on_response(200, 0.030, KEEP)
    assert prior.response_time.value == pytest.approx(0.020)
    slow.on_response(200, 0.080, KEEP)  # the mean follows the estimates, not the samples
    assert prior.response_time.value == pytest.approx((0.010 + slow.response_time) / 2)
    assert new.connection_cost(1) == pytest.approx(prior.response_time.value / 1.2)


def test_planned_requests_and_connection_cost():
    s = stats(rpc=50)
    assert s.planned_requests(7) == 7
    assert s.planned_requests(500) == 50
    s.connection_time, s.response_time = 0.1, 0.02
    assert s.connection_cost(50) == pytest.approx(2 * 0.1 + 50 * 0.02 / 1.2)
    s.requests_per_connection = 1  # no keep-alive: no speed-up
    assert s.connection_cost(1) == pytest.approx(2 * 0.1 + 0.02)


class _Ranked:
    def __init__(self, rpc: int, rt: float, qualities: list[float]) -> None:
        self.stats = stats(rpc)
        self.stats.connection_time, self.stats.response_time = 0.0, rt
        self.qualities = sorted(qualities, reverse=True)

    def pending(self) -> int:
        return len(self.qualities)

    def best_quality(self) -> float:
        return self.qualities[0]

    def top_quality_sum(self) -> float:
        return sum(self.qualities[: self.stats.requests_per_connection])


def test_rankings_of_the_four_policies():
    fast_plain = _Ranked(rpc=100, rt=0.01, qualities=[1.0] * 100)
    slow_gem = _Ranked(rpc=100, rt=0.5, qualities=[50.0] + [1.0] * 99)
    bfs, performance, quality, capability = (
        make_policy(name) for name in ("bfs", "performance", "quality", "capability")
    )
    assert bfs.score(fast_plain) == bfs.score(slow_gem)  # order of arrival decides
    assert performance.score(fast_plain) == pytest.approx(100 / (100 * 0.01 / 1.2))
    assert performance.score(fast_plain) > performance.score(slow_gem)
    assert quality.score(slow_gem) > quality.score(fast_plain)
    # 100 quality in 0.83 s beats 149 quality in 41.7 s.
    assert capability.score(fast_plain) == pytest.approx(100 / (100 * 0.01 / 1.2))
    assert capability.score(fast_plain) > capability.score(slow_gem)
    assert capability.head_size(fast_plain) == 100 and quality.head_size(fast_plain) == 1
    assert not performance.quality_ordered_urls and capability.quality_ordered_urls


def test_every_policy_has_a_class_and_an_unknown_one_is_refused_by_the_settings():
    assert tuple(POLICY_CLASSES) == POLICIES
    with pytest.raises(ConfigError, match=r"scheduling\.policy: Input should be 'bfs', "):
        config_from_dict({"scheduling": {"policy": "random"}})


def test_config_fields():
    config = config_from_dict({"scheduling": {"policy": "performance", "keepalive_speedup": 1.5}})
    assert config.scheduling.policy == "performance" and config.scheduling.keepalive_speedup == 1.5
    assert config_from_dict({}).scheduling.policy == "capability"
    for bad in (
        {"policy": "depth-first"},
        {"quality_file": "scores.txt"},
        {"quality_file": "/does/not/exist.csv"},
        {"estimate_weight": 1.0},
        {"keepalive_speedup": 0},
    ):
        with pytest.raises(ConfigError, match=f"scheduling.{next(iter(bad))}"):
            config_from_dict({"scheduling": bad})
