"""Shared, session-scoped harness: one local Ray and one ephemeral Prefect API for all tests."""

from __future__ import annotations

from crawlflow.environment import confine_to_loopback

confine_to_loopback()  # before Prefect and Ray are imported

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

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
