"""Takeover of a dead node's servers, rebuilt from the crawl's committed output.

The rules are the resume rules of `storage.checkpoint` (defined in `storage.outcomes`): a URL
is done once a committed fetches row gives it a final answer (on whichever node fetched it:
servers move), and every URL with a committed `discovered` row, or a seed, that is not done is
pending. Nothing is lost because a node records a URL's row before it sends the URL anywhere,
and the coordinator has every live node commit its rows before calling this; nothing is fetched
twice because the dead node can commit nothing more. What the dead node fetched but had not
committed is fetched again (and recorded once): a killed process cannot say which requests
reached the server. The URLs of other servers the dead node had found (committed) may not all
have been sent yet: they are returned to be sent again, and the filter and the owners' exact
sets drop those that were.

Only the dead node's uncommitted files are discarded (`storage.writer.discard_uncommitted`
with its prefix): the other nodes are alive and writing, and the rule over the whole crawl
would delete the first files of batches they are about to commit. Their committed files are
whole by the commit protocol; one that is not (damage) is left for the resume's rule to judge
and skipped here, never read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import duckdb

from crawler.scheduling.server import Item, ServerState
from crawler.scheduling.urlqueue import UrlTask
from crawler.scope.limits import counts_of
from crawler.scope.urls import server_of
from storage.files import literal
from storage.outcomes import ADMITTED_SQL, NOT_LEFT_AT_DEADLINE, fold_fetch_rows
from storage.schema import COMMITTED_DATASETS
from storage.writer import committed_batches, discard_uncommitted


@dataclass
class Recovered:
    states: list[ServerState]  # the dead node's servers, with their URLs done (seen) and pending
    budget_spent: int  # of the page budget, what its committed fetches used in this run
    foreign: list[Item]  # URLs of other servers it found, perhaps never sent


# A row's server (host:port): `url_server`, or `url_host_name` in rows written before
# issue 31, when it held host:port (a crawl resumed across an upgrade).
_SERVER = "coalesce(url_server, url_host_name)"
_FETCHES = "read_parquet(?, union_by_name = true)"


class OutputRecovery:
    def __init__(
        self,
        crawl_dir: Path,
        seeds: list[str],
        admitted_before: set[str] | None = None,
        depths: Mapping[str, int] | None = None,
        gather: Callable[[], None] | None = None,
    ) -> None:
        """`admitted_before`: the URLs a resumed crawl's earlier runs admitted (its checkpoint):
        their budget was spent before this run, by nodes whose ids this run reuses. `gather`:
        brings into `crawl_dir` what nodes of other machines published (object storage)."""
        self.crawl_dir = crawl_dir
        self.gather = gather
        self.seeds = seeds
        self.depths = depths or {}
        self.admitted_before = admitted_before or set()

    def __call__(self, node_id: str, hosts: list[str]) -> Recovered:
        """What the dead `node_id`, owner of `hosts`, leaves to the others."""
        if self.gather is not None:
            self.gather()
        discard_uncommitted(self.crawl_dir, prefix=f"{node_id}-")
        committed = [path for paths in committed_batches(self.crawl_dir) for path in paths]
        fetch_files = [literal(p) for p in committed if p.parent.name == COMMITTED_DATASETS[-1]]
        discovered_files = [literal(p) for p in committed if p.parent.name == "discovered"]
        con = duckdb.connect()
        done: set[str] = set()
        attempts: dict[str, int] = {}
        spent = 0
        admitted: set[str] = set()
        if fetch_files:
            done, attempts = fold_fetch_rows(
                con.execute(
                    f"SELECT url, fetch_status, error, attempt FROM {_FETCHES} "
                    f"WHERE list_contains(?, {_SERVER}) AND {NOT_LEFT_AT_DEADLINE}",
                    [fetch_files, hosts],
                ).fetchall()
            )
            # URLs admitted on its servers (their limit counts), and by it (its page budget).
            owned = set(hosts)
            for url, host, fetched_by in con.execute(
                f"SELECT DISTINCT url, {_SERVER}, node_id FROM {_FETCHES} "
                f"WHERE {ADMITTED_SQL} AND (list_contains(?, {_SERVER}) OR node_id = ?)",
                [fetch_files, hosts, node_id],
            ).fetchall():
                if host in owned:
                    admitted.add(url)
                if fetched_by == node_id and url not in self.admitted_before:
                    spent += 1
        pending: dict[str, int] = {}
        foreign: list[Item] = []
        if discovered_files:
            for url, depth in con.execute(
                "SELECT url, min(depth) FROM read_parquet(?) "
                "WHERE list_contains(?, split_part(url, '/', 3)) GROUP BY url",
                [discovered_files, hosts],
            ).fetchall():
                pending[url] = depth
            own_files = [p for p in discovered_files if Path(p).name.startswith(f"{node_id}-")]
            if own_files:
                foreign = con.execute(
                    "SELECT url, min(depth) FROM read_parquet(?) "
                    "WHERE NOT list_contains(?, split_part(url, '/', 3)) GROUP BY url",
                    [own_files, hosts],
                ).fetchall()
        states = {host: ServerState(host) for host in hosts}
        for host, counts in counts_of(admitted).items():
            states[host].limits = counts
        for seed in self.seeds:
            if server_of(seed) in states:
                pending.setdefault(seed, self.depths.get(seed, 0))
        for url in done:
            states[server_of(url)].seen.add(url)
        for url, depth in pending.items():
            if url in done:
                continue
            state = states[server_of(url)]
            state.scheme = url.split(":", 1)[0]
            attempt = attempts.get(url, 0) + 1
            if attempt == 1:
                state.inbox.append((url, depth))  # the adopting node scores it like a new URL
            else:
                state.seen.add(url)
                # The depth inside its server is not in the output: the crawl depth bounds it.
                state.retry_later(UrlTask(url, depth, attempt, host_depth=depth), 0.0)
        return Recovered(list(states.values()), spent, foreign)
