"""Shared, session-scoped harness: one local Ray and one ephemeral Prefect API for all tests;
and the split into fast tests and integration tests (`pytest -m "not integration"`)."""

from __future__ import annotations

from runtime.environment import confine_to_loopback

confine_to_loopback()  # before Prefect and Ray are imported

from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from unittest import mock  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from websim.sim import WebSim  # noqa: E402

# A test that uses one of these is an integration test, whatever its module says.
INTEGRATION_FIXTURES = {"ray_session", "prefect_api"}

# Property tests draw the same examples on every run, and no clock decides whether they pass.
settings.register_profile(
    "deterministic",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("deterministic")


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from runtime.ray_backend import LOCAL_RAY

    ray.init(num_cpus=2, **LOCAL_RAY)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=60):
        yield


@pytest.fixture
def two_nodes(tmp_path):
    """A factory of two in-process nodes writing under tmp_path, not started: node-0 owns
    `host`, node-1 nothing."""
    from crawler.config import CrawlConfig
    from crawler.node import CrawlerNode
    from runtime.fleet import FleetPlan, LoneNode
    from runtime.inprocess import InProcessFleet

    def build(config: CrawlConfig, host: str) -> tuple[CrawlerNode, CrawlerNode]:
        plan = FleetPlan(
            "c",
            str(tmp_path),
            config,
            [LoneNode("node-0", [host]), LoneNode("node-1", [])],
            [host],
            True,
        )
        sender, receiver = InProcessFleet(plan).launched
        return sender.node, receiver.node

    return build


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


def _refuse_to_serve(self: WebSim) -> WebSim:
    raise RuntimeError(
        "a test not marked integration started websim: mark it (or its module) "
        "with pytest.mark.integration"
    )


@contextmanager
def _serving_only_if_integration(item: pytest.Item) -> Iterator[None]:
    if item.get_closest_marker("integration"):
        yield
    else:
        with mock.patch.object(WebSim, "start", _refuse_to_serve):
            yield


# A test left in the fast half starts no server, neither in its fixtures (set up with the
# test) nor in its body: the split stays true as tests are added.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _serving_only_if_integration(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _serving_only_if_integration(item):
        return (yield)
