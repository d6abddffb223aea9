"""Shared, session-scoped harness: one local Ray and one ephemeral Prefect API for all tests;
and the split into fast tests and integration tests (`pytest -m "not integration"`)."""

from __future__ import annotations

from runtime.environment import confine_to_loopback

confine_to_loopback()  # before Prefect and Ray are imported

import logging  # noqa: E402
import os  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from unittest import mock  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

from websim.sim import WebSim  # noqa: E402

# A test that uses one of these is an integration test, whatever its module says.
INTEGRATION_FIXTURES = {"ray_session", "prefect_api", "s3_server"}

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
def ray_session(s3_server):
    """`s3_server` first: Ray's workers (the crawler nodes) take the environment of the
    process that starts Ray, and must find the S3 server where the tests' crawls do."""
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


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """An S3 API on loopback (moto's server) with a bucket `crawls`, and this process's
    environment pointed at it as a user's would be (AWS_ENDPOINT_URL, keys, region); the
    processes a test starts inherit it. Yields the environment it set."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    environment = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        # No credentials lookup off loopback (the instance metadata service).
        "AWS_EC2_METADATA_DISABLED": "true",
        # Staging directories and read mirrors of buckets, per test session.
        "XDG_CACHE_HOME": str(tmp_path_factory.mktemp("cache")),
    }
    saved = {name: os.environ.get(name) for name in environment}
    os.environ.update(environment)
    boto3.client("s3").create_bucket(Bucket="crawls")
    yield environment
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    server.stop()


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
