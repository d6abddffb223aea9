"""The node's `metrics` dataset: every `metrics_interval_s`, its levels and counters, each
answering server's rate-controller trace, and its distribution metrics (long form: `metric`,
`value`)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from crawler.cluster.peerlink import PeerLink
from crawler.node.core import NodeCore
from storage.schema import METRICS, MetricRow
from storage.writer import ParquetDatasetWriter, Publisher


class NodeMetrics:
    def __init__(
        self,
        core: NodeCore,
        crawl_dir: Path,
        link: PeerLink,
        publisher: Publisher | None = None,
    ) -> None:
        self._core = core
        self._link = link
        config = core.config
        self._writer = ParquetDatasetWriter(
            crawl_dir / "metrics",
            METRICS,
            prefix=core.node_id,
            batch_rows=config.output.write_batch_rows,
            interval_s=config.output.write_interval_s,
            publisher=publisher,
        )

    def tick(self) -> None:
        """The metrics thread: one round of rows per interval until the node stops."""
        core = self._core
        interval = core.config.output.metrics_interval_s
        next_tick = time.monotonic() + interval
        with core.lock:
            while not core.stopping:
                # The condition is notified on every fetch: wake-ups before the tick are ignored.
                core.lock.wait(timeout=max(0.0, next_tick - time.monotonic()))
                if not core.stopping and time.monotonic() >= next_tick:
                    self._write_locked()
                    next_tick += interval

    def close(self) -> None:
        """The last round of rows, written out."""
        with self._core.lock:
            self._write_locked()
        self._writer.flush()

    def _write_locked(self) -> None:
        """One row per controller trace field per server that answered since the last tick,
        and the node's own levels."""
        core = self._core
        counters = core.counters
        now = time.monotonic()
        values: list[tuple[str | None, str, float]] = [
            (None, "queued", core.frontier.queued()),
            (None, "active_connections", core.active),
            (None, "servers_owned", len(core.servers)),
            (None, "pages", counters.pages),
            (None, "fetches", counters.fetches),
            (None, "urls_done", counters.urls_done),
            *((None, f"refused_{reason}", count) for reason, count in core.scope.refused.items()),
        ]
        for answered in core.take_answered():
            server = core.servers.get(answered)
            if server is None or server.controller is None:
                continue  # handed over since it answered: its next owner reports it
            values += [
                (answered, name, value)
                for name, value in server.controller.trace(now).items()
                if value is not None
            ]
        values += [
            (None, name, value) for name, value in self._link.metric_values(counters.pages).items()
        ]
        now_wall = datetime.now(UTC)
        for host, metric, value in values:
            row: MetricRow = {
                "crawl_id": core.crawl_id,
                "node_id": core.node_id,
                "time": now_wall,
                "host": host,
                "metric": metric,
                "value": float(value),
            }
            self._writer.write(row)
