"""The `crawlflow` command: crawl, report, sql, views, warc-get, plan, websim, demo.

Every user mistake ends in one line on stderr and exit code 2; Prefect, Ray and the web
simulator are imported only by the commands that need them, so `sql` and `report` start fast.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from crawler.ratecontrol import Mode
from crawler.scheduling.policies import Policy
from runtime.environment import prepare_environment

prepare_environment()

if TYPE_CHECKING:
    from crawler.request import CrawlRequest


app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    help="A workflow-orchestrated batch web crawler: Prefect flow, Ray nodes, Parquet output.",
)


class UserError(Exception):
    """A mistake in what the user asked for; shown as one line, exit code 2."""


_DIRECTORY_HELP = "A crawl directory or the output root (or its s3://, gs://... URI)."


class CrawlInterrupted(Exception):
    """Ctrl-C or SIGTERM during a crawl; the message says how to resume it."""


@app.command()
def crawl(
    seeds: Annotated[
        list[str] | None,
        typer.Argument(help="Start URLs; with [scope] mode they say what is in scope."),
    ] = None,
    seeds_file: Annotated[
        Path | None,
        typer.Option(
            "--seeds",
            help="More start URLs: a text file (one a line, # comments), or .csv/.parquet with"
            " a url column.",
        ),
    ] = None,
    allow: Annotated[
        list[str] | None,
        typer.Option(
            "--allow", help="Also in scope: HOST, HOST:PORT, *.DOMAIN or a URL prefix HOST/PATH."
        ),
    ] = None,
    allow_private: Annotated[
        bool, typer.Option("--allow-private", help="Allow loopback/private/link-local targets.")
    ] = False,
    max_pages: Annotated[
        int | None,
        typer.Option(min=1, help="Stop after this many URLs (default: [limits] max_pages)."),
    ] = None,
    max_depth: Annotated[
        int | None,
        typer.Option(min=0, help="Links followed from a seed (default: [limits] max_depth)."),
    ] = None,
    nodes: Annotated[
        int | None,
        typer.Option(min=1, max=256, help="Crawler nodes (Ray actors); default: the plan's."),
    ] = None,
    out: Annotated[
        str,
        typer.Option(
            "--out",
            help="Output root: a directory, or object storage (s3://BUCKET/PREFIX, gs://...).",
        ),
    ] = "crawl-out",
    crawl_id: Annotated[str | None, typer.Option(help="Crawl id (default: a new one).")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="TOML or JSON settings file.")
    ] = None,
    rate_control: Annotated[
        Mode | None,
        typer.Option(help="Per-server rate controller (default: [rate_control] mode, adaptive)."),
    ] = None,
    target_ppm: Annotated[
        float | None,
        typer.Option(min=0.001, help="Target pages/min per server (modes pid, fixed)."),
    ] = None,
    policy: Annotated[
        Policy | None,
        typer.Option(help="Which server to connect to next (default: capability)."),
    ] = None,
    quality_file: Annotated[
        Path | None,
        typer.Option(help="Page quality per URL (.parquet/.csv: url, quality); else PageRank."),
    ] = None,
    deadline: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="Stop after this many seconds; what is left resumes with the same --crawl-id"
            " (default: [limits] deadline_s of the config, 3600).",
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Revisit this earlier crawl's URLs (default: the newest earlier crawl of the "
            "same servers in --out)."
        ),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="A full crawl from the seeds: revisit nothing.")
    ] = False,
) -> None:
    """Crawl from SEEDS (and the --seeds file) through the Prefect flow `crawl` and print a
    summary. Incremental by default: the URLs of the newest earlier crawl of the same servers
    in --out are revisited with conditional GETs, those most likely changed first. Exit code
    3: the crawl crossed an [alerts] threshold (all it fetched is written and reported)."""
    from crawler.alerts import AlertsRaised
    from crawler.config import read_config_file, with_overrides
    from crawler.request import crawl_request
    from crawlflow.boot import run_crawl
    from crawlflow.summary import print_report
    from storage.bucket import is_remote, local_root, readable
    from storage.lease import crawl_lease
    from storage.lock import crawl_lock
    from storage.manifest import new_crawl_id

    settings = with_overrides(
        {} if config is None else read_config_file(config),
        {
            "scheduling": {
                "policy": policy,
                "quality_file": None if quality_file is None else str(quality_file.resolve()),
            },
            "limits": {"max_pages": max_pages, "max_depth": max_depth, "deadline_s": deadline},
            "rate_control": {"mode": rate_control, "target_ppm": target_ppm},
        },
    )
    crawl_id = crawl_id or new_crawl_id()
    request = crawl_request(
        {
            "seeds": seeds or [],
            "seeds_file": None if seeds_file is None else str(seeds_file.absolute()),
            "allow": allow or [],
            "allow_private": allow_private,
            "nodes": nodes,
            "out_dir": out.rstrip("/") if is_remote(out) else str(Path(out)),
            # Chosen here, not by the flow, so that an interrupted command can name it.
            "crawl_id": crawl_id,
            "since": since,
            "incremental": not full,
            "config": settings,
        }
    )
    check_before_start(request)
    try:
        # Taken before Prefect and Ray start: a second command of this crawl id refuses at
        # once (on another machine too, through the lease in an S3 bucket); the flow holds
        # both on in this process (storage/lock.py, storage/lease.py).
        output = request.config.output
        work_dir = local_root(request.out_dir, output.staging_dir)
        with (
            crawl_lock(work_dir / crawl_id),
            crawl_lease(request.out_dir, crawl_id, output.lease_expiry_s),
        ):
            summary = run_crawl(request)
    except AlertsRaised as exc:
        print_report(readable(exc.summary["out_dir"]), exc.summary)
        raise
    except _crawl_failed() as exc:
        raise type(exc)(
            f"{exc}; what was committed is kept: run again with --crawl-id {crawl_id} "
            f"(and --out {out}) to resume"
        ) from None
    except KeyboardInterrupt:
        raise CrawlInterrupted(
            f"interrupted; what was committed is kept: run again with --crawl-id "
            f"{request.crawl_id} (and --out {out}) to resume"
        ) from None
    print_report(readable(summary["out_dir"]), summary)


def check_before_start(request: CrawlRequest) -> None:
    """Everything about a crawl that can be checked before Prefect and Ray start, in one place
    (the settings, --crawl-id and --since were checked with the request): the seeds and the
    seed file, the --allow entries, that some seed is usable, that --out can be written, and
    the earlier crawl --since names. Each problem is a one-line error."""
    from crawler.scope.seeds import check_seeds
    from storage.bucket import check_bucket, is_remote
    from storage.files import prepare_output_root

    check_seeds(
        request.seeds,
        request.seeds_file,
        request.allow,
        request.allow_private,
        request.config.fetch.resolve,
    )
    if is_remote(request.out_dir):
        check_bucket(request.out_dir, request.since)
        return
    out = Path(request.out_dir)
    prepare_output_root(out)
    if request.since is not None:
        from crawler.scheduling.recrawl import require_earlier_crawl  # only then: it imports DuckDB

        require_earlier_crawl(out, request.since)


@app.command()
def report(
    directory: Annotated[
        str, typer.Argument(help="A crawl's output directory (or its s3://, gs://... URI).")
    ],
) -> None:
    """Print the summary of the crawl output in DIRECTORY."""
    from crawlflow.summary import print_report
    from storage.bucket import readable

    print_report(readable(directory, required=True), {"out_dir": directory})


@app.command()
def sql(
    directory: Annotated[str, typer.Argument(help=_DIRECTORY_HELP)],
    query: Annotated[
        str,
        typer.Argument(help="SQL over the views fetches, pages, extracts, discovered, metrics."),
    ],
    output_format: Annotated[
        str,
        typer.Option(
            "--format",
            help="table (readable), csv, json (one object a line) or parquet (needs --output).",
        ),
    ] = "table",
    output: Annotated[
        Path | None, typer.Option("--output", help="Write the result to FILE, not stdout.")
    ] = None,
) -> None:
    """Run a DuckDB query over the crawl output and stream the result."""
    import duckdb

    from crawlflow.sqlout import FORMATS, write_result
    from storage.bucket import readable
    from storage.views import connect

    if not query.strip():
        raise UserError("the SQL query is empty")
    if output_format not in FORMATS:
        raise UserError(f"--format {output_format}: not one of {', '.join(FORMATS)}")
    if output_format == "parquet" and output is None:
        raise UserError("--format parquet needs --output FILE")
    con = connect(readable(directory, required=True))
    try:
        rows = write_result(con, query, output_format, output)
    except duckdb.Error as exc:
        raise UserError(f"SQL error: {str(exc).splitlines()[0]}") from None
    except OSError as exc:
        raise UserError(f"--output {output}: {exc.strerror or exc}") from None
    print(f"{rows} rows", file=sys.stderr)


@app.command()
def views(
    directory: Annotated[str, typer.Argument(help=_DIRECTORY_HELP)],
) -> None:
    """Print the CREATE VIEW statements of the views `sql` queries, for the DuckDB CLI or a
    notebook: `crawlflow views DIR | duckdb`, or `duckdb -init views.sql`."""
    from storage.bucket import readable
    from storage.views import view_statements

    for statement in view_statements(readable(directory, required=True)):
        print(statement)


@app.command("warc-get")
def warc_get(
    directory: Annotated[str, typer.Argument(help=_DIRECTORY_HELP)],
    url: Annotated[str, typer.Argument(help="The URL whose newest WARC record to print.")],
) -> None:
    """Print the newest WARC record of URL (headers and payload), found through `fetches`."""
    from storage.bucket import is_remote, readable, remote_record
    from storage.views import connect
    from storage.warc import RecordNotFound, locate_record, read_record

    local = readable(directory, required=True)
    con = connect(local)
    try:
        if is_remote(directory):
            record = remote_record(con, directory, local, url)
        else:
            record = read_record(*locate_record(con, local, url))
    except RecordNotFound as exc:
        raise UserError(str(exc)) from None
    sys.stdout.buffer.write(record)
    sys.stdout.flush()


@app.command()
def plan(
    instance: Annotated[Path, typer.Option("--instance", help="Allocation instance JSON.")],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the plans here.")] = None,
) -> None:
    """Compare first fit, first-fit-decreasing and the MILP optimum on an instance."""
    from allocation.milp import SolverUnavailable
    from allocation.report import plan_command

    try:
        plan_command(str(instance), None if json_out is None else str(json_out))
    except SolverUnavailable as exc:
        raise UserError(str(exc)) from None


@app.command()
def websim(
    hosts: Annotated[int, typer.Option(min=1, max=60000)] = 20,
    pages: Annotated[int, typer.Option(min=1)] = 2000,
    seed: Annotated[int, typer.Option()] = 1,
    port: Annotated[int, typer.Option(min=0, max=65535)] = 0,
    export: Annotated[Path | None, typer.Option(help="Write the ground truth here.")] = None,
) -> None:
    """Serve the synthetic web on loopback until Ctrl-C and print its hub URL."""
    from websim import WebSpec, serve_forever

    serve_forever(
        WebSpec(hosts=hosts, pages=pages, seed=seed),
        port=port,
        export_dir=None if export is None else str(export),
    )


@app.command()
def demo(
    hosts: Annotated[int, typer.Option(min=1, max=1000)] = 20,
    pages: Annotated[int, typer.Option(min=1)] = 2000,
    nodes: Annotated[int, typer.Option(min=1, max=64)] = 2,
    out: Annotated[str, typer.Option("--out")] = "crawl-out",
) -> None:
    """Serve the bundled synthetic web, crawl it through the flow, report and check coverage."""
    from crawlflow.demo import run_demo
    from storage.bucket import check_bucket, is_remote

    if is_remote(out):
        check_bucket(out, None)
    run_demo(hosts=hosts, pages=pages, nodes=nodes, out_dir=out)


def _user_errors() -> tuple[type[BaseException], ...]:
    from allocation.model import InstanceError
    from crawler.config import ConfigError
    from crawler.scheduling.recrawl import RecrawlError
    from crawler.scope.seeds import SeedError
    from storage.bucket import BucketError
    from storage.files import OutputRootError
    from storage.lock import CrawlLocked
    from storage.views import OutputNotFound, OutputUnreadable

    return (
        UserError,
        ConfigError,
        SeedError,
        OutputNotFound,
        OutputUnreadable,
        OutputRootError,
        BucketError,
        InstanceError,
        RecrawlError,
        CrawlLocked,
    )


def _crawl_failed() -> tuple[type[BaseException], ...]:
    from crawler.cluster.coordinator import CrawlFailed
    from crawlflow.boot import PrefectServerFailed

    return CrawlFailed, PrefectServerFailed


def _alerts_raised() -> type[BaseException]:
    from crawler.alerts import AlertsRaised

    return AlertsRaised


def main(argv: list[str] | None = None) -> None:
    """Run the command line `argv` (tests) or sys.argv (the command) and exit with its code;
    the command ends its process itself (see `_end_process`)."""
    if argv is None:
        # SIGTERM (timeout, systemd, container runtimes) stops the command as Ctrl-C does:
        # work under way is cut short, what was committed stays, and it says how to go on.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
    code = _run(argv)
    if argv is None:
        _end_process(code)
    sys.exit(code)


# Built once per process (it takes milliseconds: the tests run thousands of command lines).
_click_command = functools.cache(functools.partial(typer.main.get_command, app))


def _run(argv: list[str] | None) -> int:
    command = _click_command()
    try:
        code = command.main(
            args=sys.argv[1:] if argv is None else argv,
            prog_name="crawlflow",
            standalone_mode=False,
        )
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:  # usage errors: unknown option, bad value, ...
        _say(f"crawlflow: error: {exc.format_message()}")
        return 2
    except CrawlInterrupted as exc:
        _say(f"crawlflow: {exc}")
        return 130
    except (typer.Abort, KeyboardInterrupt):
        _say("crawlflow: interrupted; files already written are kept")
        return 130
    except _user_errors() as exc:
        _say(f"crawlflow: error: {exc}")
        return 2
    except _crawl_failed() as exc:
        _say(f"crawlflow: crawl failed: {exc}")
        return 1
    except _alerts_raised() as exc:
        _say(f"crawlflow: crawl failed its [alerts]: {exc}")
        return 3
    return code if isinstance(code, int) else 0


def _say(message: str) -> None:
    """`message` on stderr as one line: what it quotes of the user's input (a URL, a path)
    may hold line breaks or control characters, which are shown escaped."""
    print(
        "".join(char if char.isprintable() else repr(char)[1:-1] for char in message),
        file=sys.stderr,
    )


def _end_process(code: int) -> NoReturn:
    """End the process as the interpreter would, less its teardown: threads that are not
    daemons are waited for (Ray's shutdown) and the exit handlers run (the Prefect server is
    told to stop, logging is flushed), but the modules are not torn down one by one and the
    last garbage collection does not walk every object Prefect and Ray left (1-1.5 s after
    a crawl). What the command writes is closed before it returns, files and Parquet alike."""
    # What the interpreter runs at exit; neither has a public name. threading's waits for the
    # threads that are not daemons and wakes idle thread-pool workers so that they end.
    threading._shutdown()  # type: ignore[attr-defined]  # private, and undeclared in typeshed
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone (`| head`), closed
            stream.flush()
    os._exit(code)
