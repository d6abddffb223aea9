"""Page quality for the quality-aware policies (docs/scheduling.md). A URL's quality is fixed
when the node discovers it; the scheduler only reads it.

- `PageRankQuality` (default): PageRank computed incrementally over the link graph this node
  has discovered (the pages it fetched and their out-links; per node, so with several nodes
  each sees the part of the web its own pages link to, and URLs routed in from other nodes or
  given as seeds score as an average page, 1.0). A new URL `v` found on page `u` scores
  `(1 - d) + d * I(u) / outdeg(u)`: the PageRank estimate `v` gets from the one in-link known
  when it is discovered, in units of the average page (N * PageRank, so values discovered early
  and late in the crawl compare). `I(u)` is `u`'s importance in the latest PageRank of the
  discovered graph, which already counts the in-links `u` gained after its own discovery, or
  `u`'s discovery score if `u` is newer than that computation. The PageRank is recomputed by
  power iteration, warm-started from the previous vector, whenever the graph has grown by
  `growth` since the last time (amortized O(1) per link); pages fetched but not linked out of
  spread their rank uniformly, as usual. The uniform share that dangling pages pass to every
  page is left out of the score: it is the same for every URL discovered at one moment, and it
  only tracks the share of the graph not fetched yet.
- `FileQuality`: a user-supplied score per URL (Parquet or CSV with columns `url, quality`);
  URLs are canonicalized as the crawler does, URLs missing from the file score 0.
- `NoQuality`: the policies that ignore quality (bfs, performance) pay nothing for it.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from crawler.scope.urls import BadUrl, canonical_url

DAMPING = 0.85
UNKNOWN_SOURCE_QUALITY = 1.0  # a URL this node did not find on a page: an average page


class QualityModel(Protocol):
    def observe_page(self, url: str, links: Sequence[str]) -> None:
        """A fetched page and its canonical, in-scope out-links (all of them, seen or not)."""
        ...

    def score(self, url: str) -> float:
        """Quality of a URL being queued now (fixed from then on)."""
        ...


class NoQuality:
    def observe_page(self, url: str, links: Sequence[str]) -> None:
        pass

    def score(self, url: str) -> float:
        return 0.0


class FileQuality:
    """Scores from a Parquet (`.parquet`) or CSV file with columns `url` and `quality`."""

    def __init__(self, path: str | Path) -> None:
        self.scores = load_quality_file(path)

    def observe_page(self, url: str, links: Sequence[str]) -> None:
        pass

    def score(self, url: str) -> float:
        return self.scores.get(url, 0.0)


def load_quality_file(path: str | Path) -> dict[str, float]:
    """url -> quality; raises ValueError (one line) on a file that cannot be used."""
    path = Path(path)
    try:
        if path.suffix == ".parquet":
            table = pq.read_table(path, columns=["url", "quality"])
        elif path.suffix == ".csv":
            table = pa_csv.read_csv(
                path,
                convert_options=pa_csv.ConvertOptions(
                    include_columns=["url", "quality"],
                    column_types={"url": pa.string(), "quality": pa.float64()},
                ),
            )
        else:
            raise ValueError(f"quality file {path} must end in .parquet or .csv")
    except (OSError, pa.ArrowException, KeyError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"cannot read quality file {path}: {detail}") from None
    scores: dict[str, float] = {}
    for url, quality in zip(
        table.column("url").to_pylist(), table.column("quality").to_pylist(), strict=True
    ):
        if url is None or quality is None or not math.isfinite(quality):
            raise ValueError(f"quality file {path} has a row without a url or a finite quality")
        try:
            scores[canonical_url(url)] = float(quality)
        except BadUrl as exc:
            raise ValueError(f"quality file {path}: {exc}") from None
    return scores


class PageRankQuality:
    """Incremental PageRank over the discovered link graph (see the module docstring).

    Thread-safe: nodes call it from their fetch threads. The power iteration runs on a snapshot
    outside the model's lock, so other threads keep adding links meanwhile.
    """

    def __init__(
        self,
        damping: float = DAMPING,
        growth: float = 0.1,
        min_links: int = 1000,
        tolerance: float = 1e-4,
        max_iterations: int = 30,
    ) -> None:
        self.damping = damping
        self.growth = growth
        self.min_links = min_links
        self.tolerance = tolerance
        self.max_iterations = max_iterations
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}
        self._quality = array("d")  # per URL id: its score at discovery
        self._src = array("i")  # links, as id pairs
        self._dst = array("i")
        # N * PageRank of the ids that existed at the last computation.
        self._importance = np.zeros(0)
        self._next_compute = min_links
        self._computing = False
        self.computations = 0

    def __len__(self) -> int:
        return len(self._quality)

    def observe_page(self, url: str, links: Sequence[str]) -> None:
        with self._lock:
            source = self._id(url, UNKNOWN_SOURCE_QUALITY)
            if not links:
                return
            importance = (
                self._importance[source]
                if source < len(self._importance)
                else self._quality[source]
            )
            found = (1.0 - self.damping) + self.damping * importance / len(links)
            for link in links:
                self._src.append(source)
                self._dst.append(self._id(link, found))
            due = len(self._src) >= self._next_compute and not self._computing
            if due:
                self._computing = True
        if due:
            self._compute()

    def score(self, url: str) -> float:
        with self._lock:
            index = self._ids.get(url)
            return UNKNOWN_SOURCE_QUALITY if index is None else self._quality[index]

    def importance(self, url: str) -> float | None:
        """N * PageRank of a URL in the latest computation (None if it is newer than that)."""
        with self._lock:
            index = self._ids.get(url)
            if index is None or index >= len(self._importance):
                return None
            return float(self._importance[index])

    def _id(self, url: str, quality: float) -> int:
        index = self._ids.get(url)
        if index is None:
            index = self._ids[url] = len(self._quality)
            self._quality.append(quality)
        return index

    def _compute(self) -> None:
        with self._lock:
            # Copies: an array that exports its buffer cannot grow, and other threads append.
            src = np.array(self._src, dtype=np.int64)
            dst = np.array(self._dst, dtype=np.int64)
            start = np.array(self._quality)
            start[: len(self._importance)] = self._importance
        rank = self._pagerank(src, dst, start / start.sum())
        with self._lock:
            self._importance = rank * len(rank)
            self._next_compute = max(self.min_links, int(len(src) * (1.0 + self.growth)))
            self._computing = False
            self.computations += 1

    def _pagerank(self, src: np.ndarray, dst: np.ndarray, rank: np.ndarray) -> np.ndarray:
        n = len(rank)
        degree = np.bincount(src, minlength=n)
        weight = 1.0 / degree[src]
        dangling = degree == 0
        d = self.damping
        for _ in range(self.max_iterations):
            spread = np.bincount(dst, weights=rank[src] * weight, minlength=n)
            new = (1.0 - d) / n + d * (spread + rank[dangling].sum() / n)
            change = np.abs(new - rank).sum()
            rank = new
            if change < self.tolerance:
                break
        return rank


def make_quality_model(policy: str, quality_file: str | None) -> QualityModel:
    """The quality a policy needs: none for bfs/performance, else the file's or PageRank."""
    if policy in ("bfs", "performance"):
        return NoQuality()
    if quality_file:
        return FileQuality(quality_file)
    return PageRankQuality()
