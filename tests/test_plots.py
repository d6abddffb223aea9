"""storage.plots on small synthetic crawl outputs: the rate series and the PNG."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from storage.plots import host_rates, plot_host_rates
from storage.schema import FETCHES, METRICS
from storage.views import connect
from storage.writer import ParquetDatasetWriter

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def write_rows(directory: Path, schema: pa.Schema, rows: list[dict]) -> None:
    writer = ParquetDatasetWriter(directory, schema, "node-x", batch_rows=10_000, interval_s=3600)
    for row in rows:
        writer.write(row)
    writer.flush()


def tick(
    crawl: str, node: str, second: float, host: str | None = None, **values: float
) -> list[dict]:
    """One metrics tick of a node: its node-level row, or a host's trace rows."""
    time = T0 + timedelta(seconds=second)
    metrics = values if host else {"queued": 0.0}
    return [
        {"crawl_id": crawl, "node_id": node, "time": time, "host": host, "metric": m, "value": v}
        for m, v in metrics.items()
    ]


def fetch(crawl: str, host: str, second: float, status: int, path: str = "/p") -> dict:
    return {
        "crawl_id": crawl,
        "url": f"http://{host}{path}",
        "url_host_name": host,
        "url_path": path,
        "fetch_time": T0 + timedelta(seconds=second),
        "fetch_status": status,
        "node_id": "node-0",
        "depth": 0,
        "attempt": 1,
    }


@pytest.fixture
def crawl_dir(tmp_path: Path) -> Path:
    """Two nodes: node-0 ticks every second and owns host a (idle in its third window),
    node-1 ticks every two seconds and owns host b. An older crawl in the same root must not
    mix in."""
    rows = []
    for second in (1, 2, 3, 4):
        rows += tick("c1", "node-0", second)
    rows += tick("c1", "node-0", 1, "a", pages=10, bans=0, delay_s=0.05, srtt_ms=30.0)
    rows += tick(
        "c1", "node-0", 2, "a", pages=20, bans=1, target_ppm=600, srtt_ms=45.0, unloaded_rtt_ms=30.0
    )
    rows += tick("c1", "node-0", 4, "a", pages=5, bans=0, target_ppm=600)
    for second in (2, 4):
        rows += tick("c1", "node-1", second)
    rows += tick("c1", "node-1", 2, "b", pages=8, bans=0)
    rows += tick("c1", "node-1", 4, "b", pages=30, bans=0)
    rows += tick("c0", "node-0", -100, "old", pages=1000, bans=0)
    write_rows(tmp_path / "metrics", METRICS, rows)
    write_rows(tmp_path / "fetches", FETCHES, [fetch("c1", "a", 1, 200)])
    return tmp_path


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_rates_are_pages_over_the_node_window(crawl_dir: Path) -> None:
    series = host_rates(connect(crawl_dir))
    assert set(series) == {"a", "b"}
    a, b = series["a"], series["b"]
    # A node's first window has no previous tick: it is as long as its usual window (node-0:
    # 1 s, node-1: 2 s). Time 0 is the start of the earliest window.
    assert a.starts_s == [0, 1, 3]
    assert a.ends_s == [1, 2, 4]
    assert a.rate_rps == [10, 20, 5]
    assert a.bans == [0, 1, 0]
    assert a.target_rps == [None, 10, 10]
    assert b.starts_s == [0, 2]
    assert b.rate_rps == [4, 15]
    assert a.pages == 35 and b.pages == 38
    # The controller's pace (1 / its delay), RTT and unloaded RTT where traced.
    assert a.pace_rps == [20, None, None]
    assert a.srtt_ms == [30, 45, None]
    assert a.unloaded_ms == [None, 30, None]


def test_step_line_drops_to_the_gap_value_between_windows(crawl_dir: Path) -> None:
    a = host_rates(connect(crawl_dir))["a"]
    x, y = a.step_xy(a.rate_rps, 0.0)
    assert x == [0, 1, 1, 2, 2, 3, 3, 4]
    assert y == [10, 10, 20, 20, 0, 0, 5, 5]


def test_without_metrics_the_fetches_are_counted_per_second(tmp_path: Path) -> None:
    fetches = [fetch("c1", "a", 0.5, 200, "/robots.txt")]  # exempt from limits: not counted
    fetches += [fetch("c1", "a", 0.1 * i, 200) for i in range(1, 10)]
    fetches += [fetch("c1", "a", 1.5, 429), fetch("c1", "a", 1.6, 200)]
    write_rows(tmp_path / "fetches", FETCHES, fetches)
    a = host_rates(connect(tmp_path))["a"]
    assert a.rate_rps == [9, 1]
    assert a.bans == [0, 1]
    assert a.target_rps == [None, None]


def test_png_has_one_panel_per_host_up_to_max_hosts(crawl_dir: Path, tmp_path: Path) -> None:
    con = connect(crawl_dir)
    both = plot_host_rates(
        con, tmp_path / "out" / "both.png", limits={"a": 12.0, "b": 20.0}, unloaded_rtt_ms={"a": 25}
    )
    assert both == tmp_path / "out" / "both.png"
    one = plot_host_rates(con, tmp_path / "out" / "one.png", max_hosts=1)
    (both_w, both_h), (one_w, one_h) = png_size(both), png_size(one)
    assert one_h == both_h
    assert both_w == pytest.approx(2 * one_w, abs=2)


def test_png_of_a_crawl_without_host_rows(tmp_path: Path) -> None:
    write_rows(tmp_path / "fetches", FETCHES, [fetch("c1", "a", 0.5, 200, "/robots.txt")])
    assert png_size(plot_host_rates(connect(tmp_path), tmp_path / "empty.png"))[0] > 0
