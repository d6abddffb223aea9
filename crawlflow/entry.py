"""The `crawlflow` command's entry point (the installed script, `python -m crawlflow`).

A crawl's temporary Prefect server boots for about two seconds, which the flow waits for. For
the commands that crawl, its process is started here, first thing: before the command line is
parsed and the command's libraries are imported (a tenth of a second). A command line that
turns out wrong stops it again as the command exits.
"""

from __future__ import annotations

import sys

from runtime.environment import prepare_environment

CRAWLING_COMMANDS = {"crawl", "demo"}


def main() -> None:
    args = sys.argv[1:]
    if args and args[0] in CRAWLING_COMMANDS and "--help" not in args:
        prepare_environment()  # the server inherits it: no telemetry
        from crawlflow.boot import boot_for_the_command

        boot_for_the_command()
    from crawlflow.cli import main as run_command

    run_command()
