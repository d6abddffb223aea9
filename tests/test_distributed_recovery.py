"""Takeover of a dead node (crawler/cluster/recovery.py), and resume (storage/checkpoint.py), from
the
committed output."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from crawler.cluster.coordinator import SEED_LOT, Coordinator
from crawler.cluster.exchange import Exchange
from crawler.cluster.recovery import OutputRecovery
from storage.checkpoint import load_checkpoint
from storage.schema import DATASETS

A, B, C = "a.test:80", "b.test:80", "c.test:80"


def write(crawl_dir: Path, dataset: str, name: str, rows: list[dict]) -> Path:
    directory = crawl_dir / dataset
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=DATASETS[dataset]), path)
    return path


def fetch(url: str, node: str, status: int | None = 200, attempt: int = 1, error=None) -> dict:
    return {
        "crawl_id": "c",
        "url": url,
        "url_host_name": url.split("/")[2].split(":")[0],
        "url_server": url.split("/")[2],
        "url_path": "/" + url.split("/", 3)[3],
        "fetch_time": datetime.now(UTC),
        "fetch_status": status,
        "error": error,
        "node_id": node,
        "depth": 1,
        "attempt": attempt,
    }


def found(url: str, node: str, depth: int = 1) -> dict:
    return {"crawl_id": "c", "url": url, "depth": depth, "node_id": node}


def test_a_dead_nodes_servers_come_back_with_done_pending_and_unsent_urls(tmp_path):
    # node-1 owned b.test. Its first batch is committed; its second lost its fetches file
    # (killed between renames); node-0, alive, is between renames of its own batch.
    write(
        tmp_path,
        "discovered",
        "node-1-000001",
        [
            found(f"http://{B}/2", "node-1"),
            found(f"http://{B}/3", "node-1", depth=2),
            found(f"http://{C}/9", "node-1"),  # another node's server: maybe never sent
        ],
    )
    write(
        tmp_path,
        "fetches",
        "node-1-000001",
        [
            fetch(f"http://{B}/1", "node-1"),
            fetch(f"http://{B}/2", "node-1", status=503),  # a retry is due
        ],
    )
    lost = [
        write(tmp_path, "discovered", "node-1-000002", [found(f"http://{B}/4", "node-1")]),
        write(tmp_path, "pages", "node-1-000002", []),
    ]
    (tmp_path / "fetches" / "node-1-000003.parquet.tmp").write_bytes(b"half")
    alive = write(tmp_path, "discovered", "node-0-000001", [found(f"http://{B}/5", "node-0")])
    write(tmp_path, "fetches", "node-0-000000", [fetch(f"http://{A}/1", "node-0")])

    recovered = OutputRecovery(tmp_path, [f"http://{B}/", f"http://{A}/"])("node-1", [B])

    assert not any(path.exists() for path in lost)
    assert not (tmp_path / "fetches" / "node-1-000003.parquet.tmp").exists()
    assert alive.exists()  # a live node's batch is none of the takeover's business
    (state,) = recovered.states
    assert state.host == B
    assert sorted(state.inbox) == [(f"http://{B}/", 0), (f"http://{B}/3", 2)]
    retries = [(t.url, t.depth, t.attempt, t.quality) for _, _, t in state.retries]
    assert retries == [(f"http://{B}/2", 1, 2, 0.0)]
    assert sorted(state.seen) == [f"http://{B}/1", f"http://{B}/2"]
    assert recovered.budget_spent == 2
    assert recovered.foreign == [(f"http://{C}/9", 1)]


def test_a_dead_nodes_servers_keep_what_they_used_of_the_limits(tmp_path):
    # Both nodes fetched from b.test (it moved); refusals and robots.txt never passed the limits.
    write(
        tmp_path,
        "fetches",
        "node-0-000001",
        [fetch(f"http://{B}/cal/2024/1", "node-0"), fetch(f"http://{B}/robots.txt", "node-0")],
    )
    write(
        tmp_path,
        "fetches",
        "node-1-000001",
        [
            fetch(f"http://{B}/cal/2024/2", "node-1", status=503),
            fetch(f"http://{B}/cal/2024/2", "node-1", attempt=2),  # counted with its first try
            fetch(f"http://{B}/about", "node-1"),
            fetch(f"http://{B}/x", "node-1", status=None, error="trap: URLs like /x"),
            fetch(f"http://{B}/y", "node-1", status=None, error="robots_disallowed"),
            fetch(f"http://{A}/1", "node-1"),  # not one of the dead node's servers
        ],
    )

    recovered = OutputRecovery(tmp_path, [])("node-1", [B])

    (state,) = recovered.states
    assert state.limits.pages == 3
    assert state.limits.patterns == {"/cal/*/*": 2, "/about": 1}
    # Its page budget: first tries on any server, refusals aside (the checkpoint's rule)...
    assert recovered.budget_spent == 3
    # ... but not what a resumed crawl's earlier run, with the same node ids, admitted.
    earlier = {f"http://{B}/about"}
    assert OutputRecovery(tmp_path, [], earlier)("node-1", [B]).budget_spent == 2


def test_a_resumed_crawl_counts_the_urls_its_first_run_let_through_the_limits(tmp_path):
    write(tmp_path, "discovered", "node-0-000001", [found(f"http://{A}/2", "node-0")])
    write(
        tmp_path,
        "fetches",
        "node-0-000001",
        [
            fetch(f"http://{A}/1", "node-0"),
            fetch(f"http://{A}/robots.txt", "node-0"),
            fetch(f"http://{A}/2", "node-0", status=None, error="host_budget: 1 URLs fetched"),
            fetch(f"http://{B}/1", "node-0", status=None, error="address_refused: private"),
        ],
    )

    checkpoint = load_checkpoint(tmp_path, [f"http://{A}/1"])

    assert checkpoint.admitted == [f"http://{A}/1"]


class RecordingNode:
    """A node that only notes the coordinator's calls, in order, in a shared log."""

    def __init__(self, node_id: str, log: list[tuple[str, str]]) -> None:
        self.node_id = node_id
        self.log = log
        self.seeds: list[str] = []

    def restore(self, pending, done, admitted) -> None:
        self.log.append(("restore", self.node_id))

    def grant(self, pages: int) -> None:
        self.log.append(("grant", self.node_id))

    def start(self) -> None:
        self.log.append(("start", self.node_id))

    def add_urls(self, items: list[tuple[str, int]]) -> int:
        self.log.append(("add_urls", self.node_id))
        self.seeds.extend(url for url, _ in items)
        return len(items)


def test_nodes_start_only_once_every_node_is_restored():
    log: list[tuple[str, str]] = []
    nodes = [RecordingNode(f"node-{i}", log) for i in range(3)]
    owner = {A: "node-0", B: "node-1", C: "node-2"}
    coordinator = Coordinator(nodes, owner, 100, Exchange(owner))

    coordinator.resume({f"http://{B}/2": (1, 1)}, {f"http://{A}/1"}, [f"http://{A}/1"])

    calls = [call for call, _ in log]
    assert calls.count("restore") == calls.count("start") == 3
    assert max(i for i, c in enumerate(calls) if c != "start") < calls.index("start")


def test_a_long_seed_list_reaches_the_nodes_in_lots_after_they_start():
    log: list[tuple[str, str]] = []
    nodes = [RecordingNode(f"node-{i}", log) for i in range(2)]
    owner = {A: "node-0", B: "node-1"}
    seeds = [f"http://{(A, B)[i % 2]}/{i}" for i in range(2 * SEED_LOT + 1)]

    Coordinator(nodes, owner, None, Exchange(owner)).seed(seeds)

    # Both nodes run once the first lot is in; every seed reaches its server's node once.
    calls = [call for call, _ in log]
    assert calls[:4] == ["add_urls", "add_urls", "start", "start"]
    assert calls.count("add_urls") == 2 + 2 + 1  # the last lot holds one URL
    assert sorted(nodes[0].seeds + nodes[1].seeds) == sorted(seeds)
    assert all(url.startswith(f"http://{A}/") for url in nodes[0].seeds)
