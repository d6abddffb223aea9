"""The cluster code without a cluster: how a node call that fails or hangs on a lost machine
ends (runtime.ray_backend.RayNode, over a stand-in for Ray), what code the command gives
the cluster's workers (runtime.ray_backend.cluster_runtime_env), and how often the coordinator
looks at the nodes (crawler.cluster.coordinator.poll_interval)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray.exceptions import ActorDiedError, ActorUnavailableError, GetTimeoutError

from crawler.cluster.coordinator import CrawlFailed, NodeLost, poll_interval
from runtime import ray_backend
from runtime.ray_backend import RAY_JOB_CONFIG, RayNode, cluster_runtime_env

ROOT = Path(__file__).resolve().parents[1]


class FakeRay:
    """`ray.get` answers from a script (an exception is raised, anything else returned), and
    `ray.kill` is recorded."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = answers
        self.killed: list[Any] = []
        self.gets = 0

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        self.gets += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def kill(self, actor: Any, no_restart: bool = True) -> None:
        self.killed.append(actor)


class FakeActor:
    """Each method returns a placeholder reference, which FakeRay.get answers."""

    def __getattr__(self, name: str) -> Any:
        class Method:
            @staticmethod
            def remote(*args: Any) -> str:
                return name

        return Method()


@pytest.fixture
def fake_ray(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def install(answers: list[Any]) -> FakeRay:
        fake = FakeRay(answers)
        monkeypatch.setattr(ray_backend, "ray", fake)
        monkeypatch.setattr(ray_backend.time, "sleep", lambda s: None)
        return fake

    yield install


def unavailable() -> ActorUnavailableError:
    return ActorUnavailableError("failed to connect to all addresses", None)


def test_a_dead_actor_is_a_lost_node(fake_ray: Any) -> None:
    fake = fake_ray([ActorDiedError()])
    with pytest.raises(NodeLost):
        RayNode("node-1", FakeActor()).status()
    assert fake.killed == []  # Ray already knows it is gone


def test_an_unreachable_node_is_killed_and_lost_once_ray_confirms_it(fake_ray: Any) -> None:
    # The call fails as unreachable; after the kill, Ray still reports it unreachable twice,
    # then dead.
    actor = FakeActor()
    fake = fake_ray([unavailable(), unavailable(), GetTimeoutError(), ActorDiedError()])
    with pytest.raises(NodeLost):
        RayNode("node-1", actor).grant(5)
    assert fake.killed == [actor]
    assert fake.gets == 4


def test_a_node_ray_never_confirms_dead_fails_the_crawl_instead_of_a_takeover(
    fake_ray: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A takeover while it may still write could fetch and record its pages twice: the crawl
    # stops, resumable, instead.
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(ray_backend.time, "monotonic", lambda: float(next(clock)))
    fake_ray([unavailable()])
    with pytest.raises(CrawlFailed, match="has not confirmed its end"):
        RayNode("node-1", FakeActor()).status()


def test_a_slow_answer_is_waited_for(fake_ray: Any) -> None:
    fake = fake_ray([GetTimeoutError(), GetTimeoutError(), 7])
    assert RayNode("node-1", FakeActor()).reclaim() == 7
    assert fake.killed == []


def test_a_node_silent_past_the_limit_is_killed_and_lost(fake_ray: Any) -> None:
    silent_calls = int(ray_backend.NODE_SILENT_S / ray_backend.NODE_CALL_CHECK_S)
    fake = fake_ray([GetTimeoutError()] * silent_calls + [ActorDiedError()])
    with pytest.raises(NodeLost):
        RayNode("node-1", FakeActor()).flush()
    assert len(fake.killed) == 1


def test_the_workers_get_every_package_a_node_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RAY_JOB_CONFIG, raising=False)
    env = cluster_runtime_env()
    assert env is not None
    assert sorted(Path(path).name for path in env["py_modules"]) == sorted(
        ray_backend.CODE_PACKAGES
    )
    assert all((Path(path) / "__init__.py").exists() for path in env["py_modules"])
    assert {Path(path).parent for path in env["py_modules"]} == {ROOT}
    # Every top-level package the distribution installs, but those of tests and benchmarks.
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    installed = {pattern.rstrip("*") for pattern in find["packages"]["find"]["include"]}
    assert installed - {"bench", "websim"} == set(ray_backend.CODE_PACKAGES)


@pytest.mark.parametrize("field", ["py_modules", "working_dir"])
def test_a_job_that_names_its_code_keeps_it(monkeypatch: pytest.MonkeyPatch, field: str) -> None:
    job = {"runtime_env": {field: ["s3://bucket/crawlflow.zip"], "pip": ["duckdb"]}}
    monkeypatch.setenv(RAY_JOB_CONFIG, json.dumps(job))
    assert cluster_runtime_env() is None


def test_a_job_with_only_libraries_still_gets_the_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RAY_JOB_CONFIG, json.dumps({"runtime_env": {"pip": ["duckdb"]}}))
    env = cluster_runtime_env()
    assert env is not None and len(env["py_modules"]) == len(ray_backend.CODE_PACKAGES)


def test_the_polls_space_out_with_the_crawl_up_to_their_bound() -> None:
    # A short crawl is looked at every poll_s, so that its end is seen at once; a long one at
    # 1% of its time so far, at most every max_poll_s.
    assert [poll_interval(elapsed, 0.25, 1.0) for elapsed in (0.0, 10.0, 50.0, 100.0, 900.0)] == [
        0.25,
        0.25,
        0.5,
        1.0,
        1.0,
    ]
    assert poll_interval(500.0, 0.02, 0.02) == 0.02  # no bound above poll_s: every poll_s
