"""Where the URLs a node finds go: links of its pages and redirect targets into its own
servers' queues, those of other nodes' servers to their owners (through the node's link to the
exchange, the one routing path between nodes), and a server's sitemap entries into its
queue.

What it takes in is bounded (docs/scheduling.md#bounds): the first `[limits]
max_links_per_page` links of a page, and no URL past its server's or the node's queue bound
(`Frontier.full`): such a URL still gets its `discovered` row, and a `skipped: queue_full` row
instead of a place in the queue, so a resumed crawl finds it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from itertools import islice
from urllib.parse import urljoin

from crawler.cluster.peerlink import PeerLink
from crawler.fetching.sitemaps import SitemapEntry
from crawler.node.core import NodeCore
from crawler.node.recorder import Recorder
from crawler.scheduling.server import Item, ServerState
from crawler.scheduling.urlqueue import UrlTask
from crawler.scope.rules import BEYOND_MAX_DEPTH
from crawler.scope.traps import descends
from crawler.scope.urls import canonical_url, host_key, server_of
from errors import FetchError

# URLs not queued because a queue was full, with why (`Frontier.full`).
Skipped = list[tuple[UrlTask, FetchError]]


class Discovery:
    def __init__(self, core: NodeCore, link: PeerLink, recorder: Recorder) -> None:
        self._core = core
        self._link = link
        self._recorder = recorder

    def queue_new(self, server: ServerState, task: UrlTask, skipped: Skipped) -> bool:
        """Queue a URL of an owned server not seen yet, unless a queue bound is reached: then
        it goes to `skipped` (not seen: found again once there is room, it is queued). Under
        the lock."""
        full = self._core.frontier.full(server)
        if full is not None:
            skipped.append((task, full))
            return False
        self._core.queue(server, task)
        return True

    def record_skipped(self, skipped: Skipped) -> None:
        """The `skipped: queue_full` rows of URLs `queue_new` left out, one batch per reason.
        Their `discovered` rows are the caller's (a resumed crawl reads those)."""
        by_error: dict[FetchError, list[UrlTask]] = {}
        for task, error in skipped:
            by_error.setdefault(error, []).append(task)
        for error, tasks in by_error.items():
            self._recorder.unfetched(tasks, error)
            self._core.count_unfetched(len(tasks))

    def discover(
        self,
        links: Iterable[str],
        source: UrlTask,
        depth: int,
        foreign: list[Item],
        redirects: int = 0,
        canonical: bool = False,
    ) -> list[Item]:
        """Queue the in-scope links of this node's servers it has not seen, and add to `foreign`
        those of other nodes' servers it has not sent yet; returns both, for the
        discovered-URL log a resumed crawl reads. `redirects`: how many redirects in a row led
        to these links (a Location header). `canonical`: the links are canonical already
        (parse_html's), which saves joining and canonicalizing them again. Only the first
        `max_links_per_page` links are taken."""
        core = self._core
        if core.max_depth is not None and depth > core.max_depth:
            # Counted per link found, like the scope's refusals: the summary's `depth` line.
            beyond = sum(1 for _ in islice(links, core.config.limits.max_links_per_page))
            if beyond:
                with core.lock:
                    core.scope.refused.update({BEYOND_MAX_DEPTH: beyond})
            return []
        source_url = source.url
        source_host = server_of(source_url)
        targets: list[str] = []
        refused: Counter[str] = Counter()
        for link in islice(links, core.config.limits.max_links_per_page):
            try:
                url = link if canonical else canonical_url(urljoin(source_url, link))
                url = core.strip_params(url)
            except ValueError:  # BadUrl, or what urljoin cannot parse (a Location "http://[::1")
                continue
            reason = core.scope.refusal(url)
            if reason is None:
                targets.append(url)
            else:
                refused[reason] += 1
        core.observe_page(source_url, self._within_room(targets))
        new: list[Item] = []
        skipped: Skipped = []
        skipped_urls: set[str] = set()  # two links of the page may be one URL once stripped
        with core.lock:
            core.scope.refused.update(refused)
            descent = self._descent(source, targets, redirects)
            for url in targets:
                host = server_of(url)
                server = core.servers.get(host)
                if server is not None:
                    if url in server.seen or url in skipped_urls:
                        continue
                    # Depth inside the server: from where the crawl entered it.
                    host_depth = source.host_depth + 1 if host == source_host else 0
                    task = UrlTask(url, depth, quality=core.score(url), host_depth=host_depth)
                    if host == source_host:
                        task.descent = descent
                    if not self.queue_new(server, task, skipped):
                        skipped_urls.add(url)
                    elif redirects:
                        server.redirects[url] = redirects
                elif self._link.admit(url):
                    foreign.append((url, depth))
                else:
                    continue  # the dedup cache knows it was sent
                new.append((url, depth))
            if new:
                core.changed()
        self.record_skipped(skipped)
        return new

    def _descent(self, source: UrlTask, targets: list[str], redirects: int) -> int:
        """The descent of the source's links on its own server (crawler.scope.traps.descends):
        one more than the source's if the source's new links go mostly deeper, else 0. A
        redirect's target is the source moved: it keeps the source's descent."""
        if redirects:
            return source.descent
        server = self._core.servers.get(server_of(source.url))
        if server is None:
            return 0
        host = server.host
        new_links = [url for url in targets if url not in server.seen and server_of(url) == host]
        return source.descent + 1 if descends(source.url, new_links) else 0

    def _within_room(self, urls: list[str]) -> list[str]:
        """The URLs no queue bound leaves out now: those of other nodes' servers, those seen
        already, and as many new ones of each server as its queue and the node's have room
        for. Only these go into the page-quality graph (`observe_page`), which keeps every URL
        it is given: a URL left out must cost no memory."""
        core = self._core
        frontier = core.frontier
        with core.lock:
            if frontier.has_room(len(urls)):
                return urls  # the usual case
            node_room = frontier.node_room()
            rooms: dict[str, int] = {}
            kept: list[str] = []
            for url in urls:
                server = core.servers.get(server_of(url))
                if server is None or url in server.seen:
                    kept.append(url)
                    continue
                room = rooms.get(server.host)
                if room is None:
                    room = frontier.server_room(server)
                if room > 0 and node_room > 0:
                    kept.append(url)
                    room -= 1
                    node_room -= 1
                rooms[server.host] = room
            return kept

    def send_foreign(self, items: list[Item]) -> None:
        """Sent only once their `discovered` rows are recorded: a takeover flushes the live
        nodes' rows, then finds there every URL a dead node had been sent."""
        if items:
            self._link.send(items)

    def queue_sitemap_entries(self, server: ServerState, entries: list[SitemapEntry]) -> list[Item]:
        """Queue the sitemap's new URLs of this server (depth 0: like seeds); in a recrawl,
        put the known URLs whose `lastmod` is newer than their last visit before all others
        (queued now if the budget had left them out). Returns the URLs added, and those a queue
        bound left out (their `skipped: queue_full` rows are recorded here)."""
        core = self._core
        revisits = core.revisits
        added: list[Item] = []
        raised: set[str] = set()
        skipped: Skipped = []
        skipped_urls: set[str] = set()
        with core.lock:
            for entry in entries:
                try:
                    url = core.strip_params(canonical_url(entry.url))
                except ValueError:
                    continue
                if host_key(url) != server.host or core.scope.refusal(url) is not None:
                    continue
                boost = 0.0
                if revisits is not None and revisits.changed_since(url, entry.lastmod):
                    raised.add(url)
                    boost = 1.0
                # A known URL the recrawl did not seed (a page budget left it out) comes in only
                # when its lastmod says it changed.
                known = revisits is not None and revisits.known(url) is not None
                if url not in server.seen and url not in skipped_urls and (boost or not known):
                    task = UrlTask(url, 0, quality=core.score(url) + boost, urgent=bool(boost))
                    if not self.queue_new(server, task, skipped):
                        skipped_urls.add(url)
                    added.append((url, 0))
            if raised:
                # Re-ranked in place: the server is ours (busy) and its count does not change.
                tasks = server.queue.drain()
                for task in tasks:
                    if task.url in raised:
                        task.quality = core.score(task.url) + 1.0
                        task.urgent = True
                    server.queue.push(task)
            if added:
                core.changed()
        self.record_skipped(skipped)
        return added
