"""Pictures of a crawl: achieved request rate per host over time, against the controller's
pace, target and limit, and the host's RTT against its unloaded RTT.

The series come from the `metrics` view (the controllers' traces, one row per host per metrics
tick); a crawl without metrics rows falls back to counting the `fetches` view per second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI

import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes

# The node writes a tick's rows with one timestamp; a host row belongs to the window that ends
# at its tick and starts at the node's previous tick. A node's first tick has no previous one:
# its window is taken to be as long as the node's typical (median) window.
METRICS_SQL = """
WITH crawl AS (
    SELECT crawl_id FROM metrics GROUP BY crawl_id ORDER BY max(time) DESC LIMIT 1
),
ticks AS (
    SELECT DISTINCT node_id, time FROM metrics WHERE crawl_id = (SELECT crawl_id FROM crawl)
),
windows AS (
    SELECT node_id, time,
           epoch(time - lag(time) OVER (PARTITION BY node_id ORDER BY time)) AS length_s
    FROM ticks
),
lengths AS (
    SELECT node_id, time,
           coalesce(length_s, median(length_s) OVER (PARTITION BY node_id)) AS length_s
    FROM windows
)
SELECT m.host,
       epoch(m.time - (SELECT min(time) FROM ticks)) AS t_s,
       l.length_s,
       max(m.value) FILTER (WHERE m.metric = 'pages')      AS pages,
       max(m.value) FILTER (WHERE m.metric = 'bans')       AS bans,
       max(m.value) FILTER (WHERE m.metric = 'target_ppm') AS target_ppm,
       max(m.value) FILTER (WHERE m.metric = 'delay_s')    AS delay_s,
       max(m.value) FILTER (WHERE m.metric = 'srtt_ms')    AS srtt_ms,
       max(m.value) FILTER (WHERE m.metric = 'unloaded_rtt_ms') AS unloaded_rtt_ms,
       max(m.value) FILTER (WHERE m.metric = 'in_flight_limit') AS in_flight_limit
FROM metrics m JOIN lengths l USING (node_id, time)
WHERE m.crawl_id = (SELECT crawl_id FROM crawl) AND m.host IS NOT NULL
GROUP BY m.host, m.time, l.length_s
ORDER BY m.host, t_s
"""

# Fallback: HTTP answers per host per whole second, robots.txt excluded (servers exempt it
# from their limits). Seconds without answers are absent, as idle ticks are in `metrics`.
FETCHES_SQL = """
WITH crawl AS (
    SELECT crawl_id FROM fetches GROUP BY crawl_id ORDER BY max(fetch_time) DESC LIMIT 1
),
answers AS (
    SELECT url_server AS host, fetch_status, fetch_time FROM fetches
    WHERE crawl_id = (SELECT crawl_id FROM crawl)
      AND fetch_status IS NOT NULL AND url_path <> '/robots.txt'
)
SELECT host,
       floor(epoch(fetch_time - (SELECT min(fetch_time) FROM answers))) + 1 AS t_s,
       1.0::DOUBLE AS length_s,
       count(*) FILTER (WHERE fetch_status NOT IN (429, 503)) AS pages,
       count(*) FILTER (WHERE fetch_status IN (429, 503))     AS bans,
       NULL::DOUBLE AS target_ppm,
       NULL::DOUBLE AS delay_s,
       NULL::DOUBLE AS srtt_ms,
       NULL::DOUBLE AS unloaded_rtt_ms,
       NULL::DOUBLE AS in_flight_limit
FROM answers
GROUP BY host, t_s
ORDER BY host, t_s
"""


@dataclass
class HostRates:
    """One host's traced windows: start and end (seconds from the start of the crawl's first
    window), achieved rate, bans, the controller's target rate (after bans, or pid's), its
    pace (1 / its delay: the rate it allows), the smoothed RTT and the controller's estimate
    of the unloaded RTT."""

    host: str
    starts_s: list[float] = field(default_factory=list)
    ends_s: list[float] = field(default_factory=list)
    rate_rps: list[float] = field(default_factory=list)
    bans: list[int] = field(default_factory=list)
    target_rps: list[float | None] = field(default_factory=list)
    pace_rps: list[float | None] = field(default_factory=list)
    srtt_ms: list[float | None] = field(default_factory=list)
    unloaded_ms: list[float | None] = field(default_factory=list)
    in_flight_limit: list[float | None] = field(default_factory=list)

    @property
    def pages(self) -> float:
        return sum(
            r * (e - s) for s, e, r in zip(self.starts_s, self.ends_s, self.rate_rps, strict=True)
        )

    def step_xy(self, values: list[float], gap_value: float) -> tuple[list[float], list[float]]:
        """A step line holding each window's value from its start to its end; between windows
        that do not touch (ticks in which the host did not answer) it is `gap_value`."""
        x: list[float] = []
        y: list[float] = []
        for start, end, value in zip(self.starts_s, self.ends_s, values, strict=True):
            if x and start > x[-1] + 1e-6:
                x += [x[-1], start]
                y += [gap_value, gap_value]
            x += [start, end]
            y += [value, value]
        return x, y


def host_rates(con: duckdb.DuckDBPyConnection) -> dict[str, HostRates]:
    """Achieved rate per host per window (pages answered / window length), with the window's
    bans and the controller's target, for the latest crawl in the views."""
    rows = con.execute(METRICS_SQL).fetchall()
    if not rows:
        rows = con.execute(FETCHES_SQL).fetchall()
    # (host, start, end, pages, bans, target_ppm, ...); a zero or unknown length only happens for
    # a node with a single tick: one second is the default metrics interval.
    windows = [
        (host, t_s - (length if length and length > 0 else 1.0), t_s, *rest)
        for host, t_s, length, *rest in rows
    ]
    origin = min((w[1] for w in windows), default=0.0)
    series: dict[str, HostRates] = {}
    for host, start, end, pages, bans, target_ppm, delay_s, srtt_ms, unloaded_ms, limit in windows:
        entry = series.setdefault(host, HostRates(host))
        entry.starts_s.append(start - origin)
        entry.ends_s.append(end - origin)
        entry.rate_rps.append((pages or 0.0) / (end - start))
        entry.bans.append(int(bans or 0))
        entry.target_rps.append(None if target_ppm is None else target_ppm / 60.0)
        entry.pace_rps.append(1.0 / delay_s if delay_s else None)
        entry.srtt_ms.append(srtt_ms)
        entry.unloaded_ms.append(unloaded_ms)
        entry.in_flight_limit.append(limit)
    return series


def _nan(values: list[float | None]) -> list[float]:
    """NaN breaks a line where a window has no value."""
    return [math.nan if v is None else v for v in values]


def plot_host_rates(
    con: duckdb.DuckDBPyConnection,
    png_path: Path,
    limits: dict[str, float] | None = None,
    max_hosts: int = 12,
    unloaded_rtt_ms: dict[str, float] | None = None,
    titles: dict[str, str] | None = None,
) -> Path:
    """Draw achieved rate per host over time (the `max_hosts` busiest hosts, one panel each)
    with the controller's pace (the rate its delay allows) and target, the host's limit when
    `limits` gives it (requests/s, keyed like `url_server`) and a marker on every window that
    drew a 429/503; on a second axis the smoothed RTT over the unloaded RTT, the host's own
    from `unloaded_rtt_ms` when given (ground truth, keyed like `limits`), else the
    controller's estimate, against the 1.5x that politeness allows. So a panel shows why a
    host was crawled at the rate it was: held by its RTT, by bans, or by neither. `titles`
    names a host's panel (default: the host). Returns png_path."""
    series = sorted(host_rates(con).values(), key=lambda s: (-s.pages, s.host))[:max_hosts]
    columns = min(3, max(1, len(series)))
    rows = max(1, math.ceil(len(series) / columns))
    # Not sharex: a panel above a hidden one would lose its tick labels; the range is shared.
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 2.6 * rows), squeeze=False)
    end_s = max((s.ends_s[-1] for s in series), default=1.0)
    for ax in axes.flat[max(1, len(series)) :]:
        ax.set_visible(False)
    if not series:
        axes[0][0].text(0.5, 0.5, "no per-host rates recorded", ha="center", va="center")
    for ax, s in zip(axes.flat, series, strict=False):
        _shade_two_in_flight(ax, s)
        ax.plot(*s.step_xy(s.rate_rps, 0.0), color="tab:blue", lw=1.0, label="achieved")
        if any(p is not None for p in s.pace_rps):
            ax.plot(
                *s.step_xy(_nan(s.pace_rps), math.nan),
                color="tab:gray",
                lw=0.8,
                alpha=0.8,
                label="pace (1 / delay)",
            )
        if any(t is not None for t in s.target_rps):
            ax.plot(
                *s.step_xy(_nan(s.target_rps), math.nan),
                color="tab:green",
                ls="--",
                lw=1.0,
                label="target",
            )
        _plot_inflation(ax, s, (unloaded_rtt_ms or {}).get(s.host))
        if limits and s.host in limits:
            ax.axhline(limits[s.host], color="tab:red", ls=":", lw=1.2, label="limit")
        banned = [
            ((start + end) / 2, rate)
            for start, end, rate, bans in zip(s.starts_s, s.ends_s, s.rate_rps, s.bans, strict=True)
            if bans
        ]
        if banned:
            ax.plot(*zip(*banned, strict=True), "x", color="tab:red", ms=5, label="429/503")
        ax.set_title((titles or {}).get(s.host, s.host), fontsize=9)
        ax.set_xlim(0, end_s)
        ax.set_ylim(0, 1.15 * max([*s.rate_rps, *(r for r in s.target_rps if r), 1.0]))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.set_xlabel("time (s)", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("requests/s", fontsize=8)
    if series:
        handles: dict[str, Artist] = {}
        for ax in fig.axes:  # the RTT's second axes too
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                handles.setdefault(label, handle)
        fig.legend(handles.values(), handles.keys(), loc="upper right", fontsize=8, ncol=4)
    fig.suptitle(
        "achieved request rate per host (left axis); RTT / unloaded RTT (right axis)",
        fontsize=10,
        x=0.02,
        ha="left",
    )
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=110)
    plt.close(fig)
    return png_path


def _shade_two_in_flight(ax: Axes, s: HostRates) -> None:
    """Shade the windows in which the server's controller allowed two requests in flight: why
    its rate went past what one connection reaches."""
    label = "two in flight"
    for start, end, limit in zip(s.starts_s, s.ends_s, s.in_flight_limit, strict=True):
        if limit is not None and limit >= 2:
            ax.axvspan(start, end, color="tab:blue", alpha=0.08, lw=0, label=label)
            label = "_"  # one legend entry


def _plot_inflation(ax: Axes, s: HostRates, unloaded_ms: float | None) -> None:
    """The smoothed RTT over the unloaded RTT on a second axis of `ax` (see plot_host_rates)."""
    unloaded = [unloaded_ms] * len(s.srtt_ms) if unloaded_ms else s.unloaded_ms
    ratio = [
        None if rtt is None or not base else rtt / base
        for rtt, base in zip(s.srtt_ms, unloaded, strict=True)
    ]
    if all(r is None for r in ratio):
        return
    twin = ax.twinx()
    twin.plot(
        *s.step_xy(_nan(ratio), math.nan),
        color="tab:orange",
        lw=0.8,
        label="RTT / unloaded" + (" (truth)" if unloaded_ms else " (estimate)"),
    )
    twin.axhline(1.5, color="tab:orange", ls=":", lw=0.8, label="RTT 1.5x unloaded")
    # Up to 4x: a start's first RTTs (a cold connection, a loaded client) would squash the rest.
    twin.set_ylim(0, min(4.0, max(2.0, 1.1 * max(r for r in ratio if r is not None))))
    twin.tick_params(labelsize=7, colors="tab:orange")
