"""Nightly recrawl benchmark: nights 1-5 on a web that changes between nights.

websim serves a web whose pages change as Poisson processes (gamma-distributed rates, 10% of
the pages change per night on average; websim/changes.py; `Last-Modified` on night 1 is each
page's last change drawn from its own process); websim's default 6% of servers with missing
or wrong validators (its 30-server draw happens to give none), half of the servers publish
sitemaps with `lastmod`. Night 1 is a
full crawl. After each night the web moves on one night, and three recrawls run side by side,
each in its own output root (a copy of night 1), each revisiting its own previous night:

- `full`: incremental with no page budget (conditional GETs for every known URL);
- `change`: incremental with a budget of 30% of night 1's URLs, the default policy
  (`capability`), which ranks URLs by their estimated probability of having changed;
- `bfs`: the same budget, breadth-first (`policy = bfs`): the known URLs in breadth-first order;
- `sitemaps`: as `change`, with `sitemaps = true` (not the default): a `lastmod` newer than the
  last visit puts a URL first. Its requests include the sitemap files.

Per night and arm: HTTP requests (robots.txt and sitemaps included), bytes downloaded (body
bytes, `content_length`), share of 304s, and changed pages caught. "Caught" is the crawler's
own signal: a URL fetched tonight whose `content_digest` differs from the one its previous
visit recorded; the ground truth (websim's page versions) checks it: the stale pages are those
whose current version differs from the version the arm's archive holds, and every catch must
be one of them. The crawler runs in-process (one `CrawlerNode` of runtime/inprocess.py, the same
incremental plan the flow makes: `tasks/recrawl.py`), rate control fixed at no delay and no
hidden rate limits: the figures are counts, which the crawl speed does not change.

    .venv/bin/python -m bench.recrawl [--quick] [--json PATH] [--png PATH]

Goals: night 2 of `full` downloads at most 20% of night 1's bytes and catches every changed
page; summed over nights 2-5, `change` catches at least 1.5x the changed pages `bfs` catches;
warcio reads every WARC file written and DuckDB finds every record by its
`warc_filename`/`warc_record_offset`.
"""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import matplotlib.pyplot as plt
from warcio.archiveiterator import ArchiveIterator

from bench import harness
from crawler.config import CrawlConfig
from crawler.scheduling.recrawl import start_depths, start_urls
from runtime.backends import crawl_in_process
from runtime.fleet import single_node
from tasks.recrawl import load_revisits, start_manifest
from websim import WebSim, WebSpec

_COMMON: dict[str, Any] = {
    "rate_limit_rps": None,
    "latency_ms": (1.0, 5.0),
    "static": True,
    "change_share": 0.1,
    "sitemap_share": 0.5,
}
WEBS = {
    "full": WebSpec(hosts=30, pages=6_000, seed=14, **_COMMON),
    "quick": WebSpec(hosts=10, pages=1_500, seed=14, **_COMMON),
}
NIGHTS = 5
BUDGET_SHARE = 0.3
# arm -> (policy, budget share of night 1's URLs, read sitemaps)
ARMS = {
    "full": ("capability", None, False),
    "change": ("capability", BUDGET_SHARE, False),
    "bfs": ("bfs", BUDGET_SHARE, False),
    "sitemaps": ("capability", BUDGET_SHARE, True),
}


def crawl_night(
    sim: WebSim,
    out: Path,
    crawl_id: str,
    policy: str,
    budget: int | None,
    full: bool,
    sitemaps: bool = False,
) -> None:
    """One night's crawl, planned as the flow plans it."""
    hosts = sim.servers
    manifest = start_manifest(out, crawl_id, hosts, None, incremental=not full)
    revisits = load_revisits(out, manifest, hosts)
    config = CrawlConfig(
        scheduling={"policy": policy},
        fetch={"sitemaps": sitemaps},
        rate_control={"mode": "fixed", "fixed": {"delay_s": 0.0}},
        limits={"max_pages": budget},
    )
    plan = single_node(crawl_id, str(out), config, hosts, revisits=revisits)
    seeds = [sim.hub_url]
    crawl_in_process(
        plan, start_urls(seeds, revisits, budget, policy), start_depths(seeds, revisits), 0.05
    )


def night_figures(out: Path, crawl_id: str) -> dict[str, Any]:
    """The crawler's own figures of one night, and what it fetched (url -> digest, 200s)."""
    con = duckdb.connect()
    fetches = f"{out}/*/fetches/*.parquet"
    requests, bytes_, not_modified = con.execute(
        f"SELECT count(fetch_status), coalesce(sum(content_length), 0), "
        f"count(*) FILTER (WHERE fetch_status = 304) FROM read_parquet('{fetches}') "
        "WHERE crawl_id = ?",
        [crawl_id],
    ).fetchall()[0]
    # A URL caught: fetched with a 200 tonight, its digest different from its previous visit's.
    caught = con.execute(
        f"""
        WITH visits AS (
            SELECT crawl_id, url, content_digest, fetch_status, fetch_time
            FROM read_parquet('{fetches}')
            WHERE fetch_status IN (200, 304) AND error IS NULL AND url NOT LIKE '%/robots.txt'
        ), tonight AS (SELECT * FROM visits WHERE crawl_id = ? AND fetch_status = 200),
        before AS (
            SELECT url, arg_max(content_digest, fetch_time) AS digest
            FROM visits WHERE crawl_id < ? GROUP BY url
        )
        SELECT t.url FROM tonight t JOIN before b USING (url) WHERE t.content_digest <> b.digest
        """,
        [crawl_id, crawl_id],
    ).fetchall()
    visited = [
        url
        for (url,) in con.execute(
            f"SELECT DISTINCT url FROM read_parquet('{fetches}') "
            "WHERE crawl_id = ? AND fetch_status IN (200, 304) AND error IS NULL",
            [crawl_id],
        ).fetchall()
    ]
    return {
        "requests": requests,
        "bytes": int(bytes_),
        "share_304": not_modified / requests if requests else 0.0,
        "caught_urls": {url for (url,) in caught},
        "visited": visited,
    }


def check_warc(out: Path) -> dict[str, int]:
    """warcio reads every WARC file; DuckDB's row finds each record at its offset."""
    files = records = 0
    for path in sorted(out.glob("*/warc/*.warc.gz")):
        with open(path, "rb") as file:
            records += sum(1 for _ in ArchiveIterator(file))
        files += 1
    con = duckdb.connect()
    rows = con.execute(
        f"SELECT crawl_id, url, warc_filename, warc_record_offset, warc_record_length "
        f"FROM read_parquet('{out}/*/fetches/*.parquet') WHERE warc_filename IS NOT NULL"
    ).fetchall()
    found = 0
    for crawl_id, url, filename, offset, length in rows:
        with open(out / crawl_id / filename, "rb") as file:
            file.seek(offset)
            record = next(iter(ArchiveIterator(io.BytesIO(file.read(length)))))
        found += record.rec_headers.get_header("WARC-Target-URI") == url
    return {"files": files, "records": records, "rows": len(rows), "rows_found": found}


def run_nights(spec: WebSpec, work: Path) -> dict[str, Any]:
    with WebSim(spec) as sim:
        url_page = {sim.url_of(page): page for page in range(sim.web.n_pages)}
        reachable = sim.reachable_allowed_urls()
        first = work / "full"
        crawl_night(sim, first, "night-1", "capability", None, full=True)
        figures = night_figures(first, "night-1")
        urls_night_1 = len(figures["visited"])
        budget = round(BUDGET_SHARE * urls_night_1)
        for arm in ARMS:
            if arm != "full":
                shutil.copytree(first, work / arm)
        # The version of each page the arm's archive holds.
        version = {url: 0 for url in figures["visited"] if url in url_page}
        archived = {arm: dict(version) for arm in ARMS}
        rows = [
            {
                "night": 1,
                "arm": arm,
                **_public(figures),
                "changed": 0,
                "stale": 0,
                "caught": 0,
                "caught_true": 0,
            }
            for arm in ARMS
        ]
        for night in range(2, NIGHTS + 1):
            changed = sim.advance_night() & reachable
            now = sim.changes.version
            for arm, (policy, share, sitemaps) in ARMS.items():
                out = work / arm
                crawl_id = f"night-{night}"
                stale = {u for u, v in archived[arm].items() if v != now[url_page[u]]}
                budget_tonight = None if share is None else budget
                crawl_night(sim, out, crawl_id, policy, budget_tonight, False, sitemaps)
                figures = night_figures(out, crawl_id)
                caught = figures["caught_urls"] & url_page.keys()  # not the sitemap files
                for url in figures["visited"]:
                    if url in url_page:
                        archived[arm][url] = int(now[url_page[url]])
                rows.append(
                    {
                        "night": night,
                        "arm": arm,
                        **_public(figures),
                        "changed": len(changed),
                        "stale": len(stale),
                        "caught": len(caught),
                        "caught_true": len(caught & stale),
                    }
                )
        warc = {arm: check_warc(work / arm) for arm in ARMS}
    return {"rows": rows, "budget": budget, "urls_night_1": urls_night_1, "warc": warc}


def _public(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: figures[k] for k in ("requests", "bytes", "share_304")}


def goals(result: dict[str, Any]) -> dict[str, Any]:
    rows = {(r["arm"], r["night"]): r for r in result["rows"]}
    night_2 = rows["full", 2]
    bytes_share = night_2["bytes"] / rows["full", 1]["bytes"]
    change = sum(rows["change", n]["caught"] for n in range(2, NIGHTS + 1))
    sitemaps = sum(rows["sitemaps", n]["caught"] for n in range(2, NIGHTS + 1))
    bfs = sum(rows["bfs", n]["caught"] for n in range(2, NIGHTS + 1))
    warc_ok = all(
        w["rows"] == w["rows_found"] and w["records"] > 0 for w in result["warc"].values()
    )
    return {
        "night2_bytes_share": round(bytes_share, 4),
        "night2_bytes_at_most_20pct": bytes_share <= 0.2,
        "night2_catches_every_change": night_2["caught"]
        == night_2["caught_true"]
        == night_2["stale"],
        "change_vs_bfs_caught": round(change / max(1, bfs), 2),
        # Night 2 has one visit per URL behind it: only the Last-Modified dates rank it.
        "change_vs_bfs_caught_night_2": round(
            rows["change", 2]["caught"] / max(1, rows["bfs", 2]["caught"]), 2
        ),
        "change_vs_bfs_caught_nights_3_5": round(
            sum(rows["change", n]["caught"] for n in range(3, NIGHTS + 1))
            / max(1, sum(rows["bfs", n]["caught"] for n in range(3, NIGHTS + 1))),
            2,
        ),
        "change_at_least_1_5x_bfs": change >= 1.5 * bfs,
        "sitemaps_vs_bfs_caught": round(sitemaps / max(1, bfs), 2),
        "every_catch_is_a_true_change": all(r["caught"] == r["caught_true"] for r in rows.values()),
        "warc_every_record_found": warc_ok,
    }


def print_table(result: dict[str, Any], checks: dict[str, Any]) -> None:
    harness.print_table(
        None,
        ("night", "arm", "requests", "MB", "304 share", "changed", "stale", "caught"),
        [
            [
                str(r["night"]),
                r["arm"],
                str(r["requests"]),
                f"{r['bytes'] / 1e6:.2f}",
                f"{r['share_304']:.2f}",
                str(r["changed"]),
                str(r["stale"]),
                str(r["caught"]),
            ]
            for r in result["rows"]
        ],
        text_columns=(1,),
    )
    print(f"budget of the budgeted arms: {result['budget']} of {result['urls_night_1']} URLs")
    for arm, w in result["warc"].items():
        print(
            f"WARC {arm}: {w['files']} files, {w['records']} records read by warcio; "
            f"{w['rows_found']}/{w['rows']} fetches rows find their record"
        )
    for name, value in checks.items():
        print(f"{name}: {value}")


def plot(result: dict[str, Any], path: Path) -> None:
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    nights = list(range(1, NIGHTS + 1))
    rows = {(r["arm"], r["night"]): r for r in result["rows"]}
    panels = [
        ("MB downloaded", lambda r: r["bytes"] / 1e6),
        ("HTTP requests", lambda r: r["requests"]),
        ("share of 304s", lambda r: r["share_304"]),
    ]
    for ax, (title, value) in zip(axes, panels, strict=False):
        for arm in ARMS:
            ax.plot(nights, [value(rows[arm, n]) for n in nights], marker="o", label=arm)
        ax.set_title(title)
        ax.set_xlabel("night")
    ax = axes[3]
    later = nights[1:]
    ax.plot(later, [rows["full", n]["stale"] for n in later], "k--", label="changed (truth)")
    for arm in ARMS:
        ax.plot(later, [rows[arm, n]["caught"] for n in later], marker="o", label=f"{arm} caught")
    ax.set_title(f"changed pages caught (budget {BUDGET_SHARE:.0%})")
    ax.set_xlabel("night")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = harness.arguments(__doc__, quick="a smaller web")
    parser.add_argument("--png", type=Path, help="the plot (default: next to the JSON)")
    args = parser.parse_args()
    run = harness.start("recrawl", args)
    size = "quick" if args.quick else "full"
    work = Path(tempfile.mkdtemp(prefix="bench-recrawl-"))
    try:
        result = run_nights(WEBS[size], work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    checks = goals(result)
    print_table(result, checks)
    png = args.png or run.result_file.with_suffix(".png")
    plot(result, png)
    print(f"plot: {png}")
    run.write_json(
        {"web": {"hosts": WEBS[size].hosts, "pages": WEBS[size].pages}, "goals": checks, **result}
    )


if __name__ == "__main__":
    main()
