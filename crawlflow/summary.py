"""Terminal rendering of a crawl's summary (one screen), shared by `crawl`, `report`, `demo`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

SUMMARY_LABELS = {
    "pages": "HTML pages (stored, or confirmed by a 304)",
    "urls_fetched": "URLs fetched",
    "fetches": "HTTP attempts (incl. retries, robots.txt)",
    "duplicate_pages": "duplicate pages",
    "hosts": "servers",
    "status_2xx": "2xx",
    "status_3xx": "3xx",
    "not_modified": "304 (unchanged since the earlier crawl)",
    "status_4xx": "4xx (not 429)",
    "bans": "429/503 (slow-down answers)",
    "status_5xx": "5xx (not 503)",
    "robots_denied": "refused by robots.txt",
    "network_errors": "network/limit errors",
    "trap_refusals": "refused as link traps",
    "family_skipped": "skipped: URL family kept failing",
    "left_at_deadline": "left at the deadline (resumable)",
    "seeds": "seeds (unique, canonical)",
    "seeds_duplicates": "seed lines repeating an earlier seed",
    "seeds_malformed": "seed lines set aside as malformed",
    "servers_unreachable": "servers that never answered",
    "bytes": "bytes received",
    "duration_s": "duration (s)",
    "pages_per_s": "pages per second",
    "ban_share": "429/503 share",
}


def print_summary(
    summary: dict[str, Any], hosts: list[dict[str, Any]], console: Console | None = None
) -> None:
    console = console or Console()
    table = Table(title=f"crawl {summary.get('crawl_id', '')}".strip(), show_header=False)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, label in SUMMARY_LABELS.items():
        if key in summary or not key.startswith(("seeds", "servers_")):
            table.add_row(label, str(summary.get(key)))
    console.print(table)
    if summary.get("seeds_malformed_examples"):
        examples = "; ".join(summary["seeds_malformed_examples"])
        console.print(
            f"malformed seed lines (all in {summary.get('out_dir', '')}/seeds/rejected.parquet):"
            f" {examples}",
            markup=False,
        )
    if summary.get("refused"):
        refused = Table(title="URLs refused or failed, per reason (links not followed: per link)")
        refused.add_column("reason")
        refused.add_column("count", justify="right")
        for reason, count in summary["refused"].items():
            refused.add_row(reason, str(count))
        console.print(refused)
    for alert in summary.get("alerts", []):
        console.print(f"alert: {alert}", markup=False)
    usage = summary.get("nodes")
    if isinstance(usage, dict) and usage.get("nodes"):
        print_nodes(usage["nodes"], console)
    if hosts:
        shown = hosts[:15]
        per_host = Table(title=f"top {len(shown)} of {len(hosts)} servers by fetches")
        for column in shown[0]:
            per_host.add_column(column, justify="left" if column == "host" else "right")
        for row in shown:
            per_host.add_row(*(str(v) for v in row.values()))
        console.print(per_host)
    if "out_dir" in summary:
        console.print(
            f"output: {summary['out_dir']}  (query it: crawlflow sql {summary['out_dir']}"
            ' "SELECT ...")'
        )


def print_nodes(rows: list[dict[str, Any]], console: Console) -> None:
    """The crawler nodes of a just-finished crawl: what each did, and on Ray the machine (Ray
    node: its address and the start of its id) it ran on."""
    table = Table(title="crawler nodes")
    columns = ["node_id", "kind", "lost", "pages", "fetches"]
    for column in columns:
        table.add_column(column, justify="right" if column in ("pages", "fetches") else "left")
    on_ray = "ray_node_ip" in rows[0]
    if on_ray:
        table.add_column("Ray node")
    for row in rows:
        cells = [str(row[column]) for column in columns]
        if on_ray:
            cells.append(f"{row.get('ray_node_ip')} {str(row.get('ray_node_id'))[:8]}")
        table.add_row(*cells)
    console.print(table)


def print_report(directory: Path, extra: dict[str, Any] | None = None) -> None:
    """The summary of the crawl in `directory` (with `extra` laid over it: a just-finished
    crawl's own figures), its per-server table, and the rate plot beside its output (drawn
    here unless `extra` names it: the flow's report step draws it)."""
    from storage.queries import crawl_summary, per_host
    from storage.views import connect

    con = connect(directory)
    summary = {**crawl_summary(con), **(extra or {})}
    print_summary(summary, per_host(con))
    png = summary.get("plot")
    if png is None:
        from storage.plots import plot_host_rates

        png = plot_host_rates(con, directory / "host_rates.png")
    print(f"achieved rate per server over time: {png}")
