"""The node's shared state (crawler/node/core.py): its rules, the page budget first, and a scan
of the code for anything that changes it behind its methods' back."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import pytest

from crawler.cluster.status import Counters
from crawler.config import CrawlConfig
from crawler.node.core import UNLIMITED, NodeCore
from crawler.node.settings import NodeSettings
from crawler.scheduling.server import ServerState
from crawler.scheduling.urlqueue import UrlTask

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1:9"  # loopback, nothing listens: no test here makes a request


def make_core(page_budget: int | None) -> NodeCore:
    settings = NodeSettings(
        node_id="node-0",
        crawl_id="c",
        out_dir="unused",
        config=CrawlConfig(),
        hosts=[HOST],
        scope_hosts=[HOST],
        allow_private=True,
        page_budget=page_budget,
        revisits=None,
    )
    return NodeCore(settings)


def core_with_urls(page_budget: int | None, urls: int) -> tuple[NodeCore, ServerState]:
    core = make_core(page_budget)
    server = ServerState(HOST)
    with core.lock:
        core.own(server)
        for number in range(urls):
            core.queue(server, UrlTask(f"http://{HOST}/{number}", 0))
    return core, server


def later() -> float:
    """A time at which a new server may be contacted (its controller was made just now)."""
    return time.monotonic() + 3600.0


# ---- the page budget ------------------------------------------------------------------------


def test_each_new_url_takes_one_page_and_none_starts_without_one():
    core, server = core_with_urls(page_budget=2, urls=3)
    with core.lock:
        taken = [core.take_task(server, later()) for _ in range(3)]
    assert [task.url if task else None for task in taken] == [
        f"http://{HOST}/0",
        f"http://{HOST}/1",
        None,
    ]
    assert core.budget == 0 and server.pending() == 1


def test_a_retry_costs_no_page():
    core, server = core_with_urls(page_budget=0, urls=0)
    with core.lock:
        core.queue_retry(server, UrlTask(f"http://{HOST}/r", 0, attempt=2))
        task = core.take_task(server, later())
    assert task is not None and task.attempt == 2
    assert core.budget == 0
    assert server.seen == {f"http://{HOST}/r"}


def test_a_url_put_back_gets_its_page_back_and_comes_next():
    core, server = core_with_urls(page_budget=1, urls=2)
    with core.lock:
        task = core.take_task(server, later())
    assert task is not None and core.budget == 0
    core.put_back(server, task)
    assert core.budget == 1
    with core.lock:
        again = core.take_task(server, later())
    assert again is not None and again.url == task.url


def test_a_retry_put_back_gives_no_page():
    core, server = core_with_urls(page_budget=0, urls=0)
    with core.lock:
        core.queue_retry(server, UrlTask(f"http://{HOST}/r", 0, attempt=2))
        task = core.take_task(server, later())
    assert task is not None
    core.put_back(server, task)
    assert core.budget == 0 and server.pending() == 1


def test_no_connection_opens_without_budget_until_a_grant():
    core, server = core_with_urls(page_budget=0, urls=1)
    with core.lock:
        assert core.open_connection(later()) is None
    core.grant(1)
    with core.lock:
        assert core.open_connection(later()) is server
        assert core.active == 1 and server.busy
        core.close_connection(server)
    assert core.active == 0 and not server.busy


def test_a_grant_wakes_a_worker_waiting_for_budget():
    core = make_core(page_budget=0)
    woken = threading.Event()

    def worker() -> None:
        with core.lock:
            while core.budget <= 0:
                core.lock.wait(timeout=30.0)
        woken.set()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    time.sleep(0.05)
    core.grant(3)
    assert woken.wait(timeout=5.0)
    thread.join()
    assert core.budget == 3


def test_reclaim_hands_back_what_is_left_and_leaves_none():
    core = make_core(page_budget=5)
    assert core.reclaim() == 5 and core.budget == 0
    assert core.reclaim() == 0


def test_without_max_pages_the_budget_never_runs_out_or_goes_back():
    core, server = core_with_urls(page_budget=None, urls=1)
    with core.lock:
        assert core.take_task(server, later()) is not None
    assert core.reclaim() == 0
    assert core.budget >= UNLIMITED - 1


def test_refused_urls_get_their_pages_back():
    core, server = core_with_urls(page_budget=2, urls=2)
    with core.lock:
        tasks = [core.take_task(server, later()) for _ in range(2)]
    assert core.budget == 0
    core.refund_budget([task for task in tasks if task is not None])
    assert core.budget == 2


def test_a_refused_retry_gives_back_no_page():
    """Its family closed while it waited: it had taken no page, so it gives none back (the
    node would otherwise start one URL more than the driver granted)."""
    core, server = core_with_urls(page_budget=0, urls=0)
    with core.lock:
        core.queue_retry(server, UrlTask(f"http://{HOST}/r", 0, attempt=2))
        retry = core.take_task(server, later())
    assert retry is not None
    core.refund_budget([retry])
    assert core.budget == 0


# ---- counts and the end ---------------------------------------------------------------------


def test_counts_move_only_through_the_methods():
    core = make_core(page_budget=None)
    core.count_fetched(page=True)
    core.count_fetched(page=False)
    core.count_unfetched(3)
    core.count_fetch_rows(5)
    with core.lock:
        core.changed()
    counts = core.counters
    assert counts == Counters(fetches=5, pages=1, urls_done=5, activity=2)
    counts.fetches += 1  # a copy: the node's own counts do not move
    assert core.counters.fetches == 5


def test_the_first_failure_is_the_one_reported():
    core = make_core(page_budget=None)
    core.record_failure("node-0-conn0: ValueError: first")
    core.record_failure("node-0-conn1: KeyError: second")
    assert core.failure == "node-0-conn0: ValueError: first"


def test_stop_wakes_a_waiting_thread():
    core = make_core(page_budget=None)
    stopped = threading.Event()

    def worker() -> None:
        with core.lock:
            while not core.stopping:
                core.lock.wait(timeout=30.0)
        stopped.set()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    time.sleep(0.05)
    core.stop()
    assert stopped.wait(timeout=5.0)
    thread.join()


def test_the_servers_that_answered_are_reported_once():
    core = make_core(page_budget=None)
    with core.lock:
        core.server_answered("b.example")
        core.server_answered("a.example")
        core.server_answered("b.example")
        assert core.take_answered() == ["a.example", "b.example"]
        assert core.take_answered() == []


# ---- nothing changes the state behind the methods' back --------------------------------------

# How code outside core.py reaches a NodeCore: a local `core`, or `self.core`, `self._core`,
# `node.core`.
CORE_ATTRIBUTES = {"core", "_core"}
# Methods by which a dict, set or list changes.
CONTAINER_MUTATORS = {
    "add",
    "append",
    "clear",
    "discard",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "setdefault",
    "update",
}


def is_core(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "core"
    return isinstance(node, ast.Attribute) and node.attr in CORE_ATTRIBUTES


def inside_core(node: ast.expr) -> ast.Attribute | None:
    """The `core.<attribute>` that `node` (`core.a`, `core.a.b`, `core.a[k]`...) is part of."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and is_core(node.value):
            return node
        node = node.value
    return None


def writes_behind_core(source: str, containers: set[str]) -> list[str]:
    """Where `source` assigns or deletes something of a NodeCore (`core.x = `, `core.x += `,
    `core.x.y = `, `core.x[k] = `), uses a private attribute of it (`core._x`), or changes a
    container it exposes (`core.servers.pop(...)`; `containers`: their names)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            if isinstance(node.ctx, (ast.Store, ast.Del)) and inside_core(node) is not None:
                found.append(f"line {node.lineno}: writes {ast.unparse(node)}")
            if isinstance(node, ast.Attribute) and is_core(node.value) and node.attr[0] == "_":
                found.append(f"line {node.lineno}: uses private {ast.unparse(node)}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in CONTAINER_MUTATORS
            and isinstance(container := node.func.value, ast.Attribute)
            and is_core(container.value)
            and container.attr in containers
        ):
            found.append(f"line {node.lineno}: changes {ast.unparse(node.func.value)}")
    return found


def exposed_containers(core: NodeCore) -> set[str]:
    """The public attributes and properties of a NodeCore that hold a dict, set or list."""
    names = [name for name in dir(core) if not name.startswith("_")]
    return {name for name in names if isinstance(getattr(core, name), (dict, set, list))}


def test_no_module_changes_node_state_behind_its_methods():
    containers = exposed_containers(make_core(page_budget=None))
    assert containers == {"servers"}  # the frontier's own, read by the parts under the lock
    core_module = ROOT / "crawler" / "node" / "core.py"
    modules = [
        path
        for package in ("crawler", "crawlflow", "runtime", "tasks")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != core_module
    ]
    assert len(modules) > 40
    found = [
        f"{path.relative_to(ROOT)} {where}"
        for path in modules
        for where in writes_behind_core(path.read_text(), containers)
    ]
    assert found == []


def test_no_public_attribute_of_the_node_state_is_plain_mutable_data():
    """What the methods own is private; what stays public is set once, or an object that keeps
    its own rules (the frontier, the URL limits)."""
    core = make_core(page_budget=None)
    public = {name: value for name, value in vars(core).items() if not name.startswith("_")}
    assert not [name for name, value in public.items() if isinstance(value, (dict, set, list))]
    assert not [name for name, value in public.items() if isinstance(value, Counters)]


@pytest.mark.parametrize(
    "line",
    [
        "core.budget = 0",
        "self.core.budget += pages",
        "unused, core.budget = core.budget, 0",
        "self._core.counters.fetches += 1",
        "core.servers[host] = server",
        "del node.core.failure",
        "core._sessions.clear()",
        "core.servers.pop(host)",
    ],
)
def test_the_scan_sees_each_way_of_writing(line):
    assert writes_behind_core(line, {"servers"}) != []


@pytest.mark.parametrize(
    "line",
    [
        "self.core = core = NodeCore(settings)",
        "budget = core.budget",
        "core.grant(pages)",
        "server = core.servers.get(host)",
        "core.frontier.remove(server)",
        "server.redirects.pop(url, None)",
        "core.servers[host].limits.add(counts)",
    ],
)
def test_the_scan_lets_reads_and_method_calls_be(line):
    assert writes_behind_core(line, {"servers"}) == []
