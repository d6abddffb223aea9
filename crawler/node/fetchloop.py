"""The fetch loop: each worker thread is one of the node's connections. It takes the best
server the frontier offers, makes up to P(s,i) requests to it over that server's keep-alive
session at the pace its rate controller allows, and gives it back. Where the pace asks for the
next request before the last one's answer is in, a second lane makes some of those requests:
over the same connection as soon as the last answer has arrived (while the first lane handles
that page), or beside it over a second connection where the controller allows two requests in
flight (docs/rate-control.md). The worker gives the server back once both lanes are done.

Read top-down: `work` (one thread), `serve` (one connection), `fetch` (one URL); then what a
connection needs besides pages (the address check, robots.txt, sitemaps) and the pieces the
steps share.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from crawler.fetching.fetcher import FetchResult, ServerSession
from crawler.fetching.headers import parse_retry_after
from crawler.fetching.politeness import RetryPolicy, RobotsRules
from crawler.fetching.sitemaps import read_sitemaps, sitemap_urls
from crawler.node.core import NodeCore
from crawler.node.discovery import Discovery
from crawler.node.handover import Handover
from crawler.node.outcome import outcome_of
from crawler.node.recorder import Recorder
from crawler.ratecontrol import make_in_flight_limit
from crawler.scheduling.failures import is_failure, is_slow
from crawler.scheduling.server import ServerState
from crawler.scheduling.urlqueue import UrlTask
from crawler.scope.addresses import AddressGuard, AddressRefused, unresolvable
from crawler.scope.traps import content_shape, url_family
from crawler.scope.urls import server_of
from errors import DEADLINE, ErrorClass, FetchError, family_errors, internal_error
from storage.writer import OutputFailed

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Answer:
    """A fetch's result and what the node made of it at once."""

    result: FetchResult
    retry_after: float | None  # its Retry-After in seconds, clamped to retry_after_max_s
    asked_s: float | None  # the same as the server asked for
    own_failure: bool  # a failure of this URL alone (crawler/scheduling/failures.py)
    spent_budget: bool  # this failure spent the server's failure budget


# A worker holding a server sleeps until its next request only if that is this close; a longer
# wait gives the connection slot to another server (politeness must not idle the node).
LINGER_S = 0.25


class Wire:
    """A connection's requests on the wire: each holds a slot, and slot i sends over the
    server's session i, so with one request in flight at a time the lanes take turns on one
    keep-alive connection, and a second connection opens only for a second request in flight."""

    def __init__(self) -> None:
        self._free = [True, True]
        self._changed = threading.Condition()

    def take(self, limit: Callable[[], int], ended: Callable[[], bool]) -> int | None:
        """A free slot once fewer than `limit()` are held (read afresh: it may drop while the
        other lane's request is out); None once `ended()`."""
        with self._changed:
            while not ended():
                if self._free.count(False) < limit():
                    slot = self._free.index(True)
                    self._free[slot] = False
                    return slot
                self._changed.wait(0.05)
        return None

    def give_back(self, slot: int) -> None:
        with self._changed:
            self._free[slot] = True
            self._changed.notify()


@dataclass(slots=True)
class Turn:
    """A lane's slot on the wire for one request, given back as soon as its answer is in."""

    wire: Wire
    slot: int
    held: bool = True

    def end(self) -> None:
        if self.held:
            self.held = False
            self.wire.give_back(self.slot)


@dataclass(slots=True)
class Connection:
    """One connection's worth of work on a server, shared by its lanes (the worker's, and a
    second one where the pace runs ahead of the answers): the requests left of its P(s,i),
    whether it has ended (a lane saw no more URLs due, or a reason to close), its wire and the
    second lane."""

    left: int
    ended: bool = False
    wire: Wire = field(default_factory=Wire)
    second: Future[None] | None = None


# Pages parsed at once per node: parsing a page costs about 40 times its size while it lasts
# (80 MB for a page of 100,000 links), so with one parse per connection the node's memory
# would follow its connections. Two keep a node's share of the CPU (docs/scheduling.md#bounds).
PARSE_SLOTS = 2


class FetchLoop:
    def __init__(
        self,
        core: NodeCore,
        recorder: Recorder,
        discovery: Discovery,
        handover: Handover,
        allow_private: bool,
    ) -> None:
        self._core = core
        self._recorder = recorder
        self._discovery = discovery
        self._handover = handover
        self._guard = AddressGuard(allow_private, resolve=core.config.fetch.resolve)
        self._retry = RetryPolicy(core.config.retry, random.Random(core.node_id))
        self._parsing = threading.BoundedSemaphore(PARSE_SLOTS)
        # At most one second lane per worker.
        self._second_lanes = ThreadPoolExecutor(
            core.config.scheduling.max_connections, thread_name_prefix=f"{core.node_id}-lane"
        )
        # Mode "rtt": docs/rate-control.md's MaxRequestCount over all of this node's connections.
        self._in_flight = make_in_flight_limit(
            core.config.rate_control, core.config.scheduling.max_connections, time.monotonic()
        )

    # ---- one thread, one connection, one URL --------------------------------------------------

    def work(self) -> None:
        """A worker thread, until the node stops."""
        core = self._core
        while True:
            with core.lock:
                if core.stopping:
                    return
                server = core.open_connection(time.monotonic())
                if server is None:
                    # Without page budget only a grant (which notifies) can bring work.
                    core.lock.wait(timeout=self._idle_wait() if core.budget > 0 else 0.5)
                    continue
            try:
                self.serve(server)
            finally:
                with core.lock:
                    core.close_connection(server)
                    self._handover.connection_closed(server)
                    core.changed()

    def close(self) -> None:
        """The workers have stopped (each waits for its second lane first)."""
        self._second_lanes.shutdown()

    def serve(self, server: ServerState) -> None:
        """One connection's worth of work on one server."""
        session = self._core.session(server)
        refusal = self._address_refusal(server, session)
        if refusal is not None:
            self._fail_queued(server, refusal)
            return
        if server.robots is None and not self._load_robots(server, session):
            return
        connection = Connection(server.batch)
        try:
            self.lane(server, connection, first=True)
        finally:
            connection.ended = True
            if connection.second is not None:
                connection.second.result()  # its OutputFailed stops the node as the worker's

    def lane(self, server: ServerState, connection: Connection, first: bool) -> None:
        """Requests to the server over one connection until the connection's work is done, each
        sent once the wire has a slot for it; the worker's lane (`first`) starts a second one
        once the pace runs ahead of the answers (`HostRateController.ahead_of_answers`)."""
        core = self._core
        controller = server.controller
        assert controller is not None
        wire = connection.wire

        def ended() -> bool:
            return connection.ended or core.stopping

        try:
            while True:
                with core.lock:
                    if connection.ended or connection.left <= 0:
                        return
                    connection.left -= 1
                slot = wire.take(controller.in_flight_limit, ended)
                if slot is None:
                    return
                turn = Turn(wire, slot)
                try:
                    keep_connection = self._next_request(server, connection, first, turn)
                finally:
                    turn.end()
                if not keep_connection:
                    return
        except BaseException:
            connection.ended = True  # the other lane must not wait for a slot forever
            raise

    def _next_request(
        self, server: ServerState, connection: Connection, first: bool, turn: Turn
    ) -> bool:
        """One request of a lane holding `turn`: False when the lane should stop."""
        core = self._core
        task = self.next_task(server)
        if task is None:
            with core.lock:
                connection.left += 1  # not spent
            # Nothing due now: the connection ends with the worker's lane; the second's URLs
            # may still come from the page the worker's lane is handling.
            connection.ended = connection.ended or first
            return False
        assert server.controller is not None
        if (
            first
            and connection.second is None
            and connection.left > 0
            and server.controller.ahead_of_answers()
        ):
            connection.second = self._second_lanes.submit(self.lane, server, connection, False)
        try:
            keep_connection = self.attempt(server, core.session(server, lane=turn.slot), task, turn)
        except OutputFailed:
            raise  # the disk, not the URL: the node stops (crawler/node/control.py)
        except Exception as exc:
            # A bug that some server's answer (or robots.txt, or an earlier crawl's history of
            # the URL) sets off must cost that URL, not the worker thread: a dead worker keeps
            # its server taken and the crawl never ends.
            logger.exception("fetching %s failed", task.url)
            self.unfetched([task], internal_error(exc))
            keep_connection = False
        if not keep_connection:
            connection.ended = True
        return keep_connection

    def attempt(
        self, server: ServerState, session: ServerSession, task: UrlTask, turn: Turn
    ) -> bool:
        """Every step of one URL: robots.txt, the limits, the server's pace, the fetch (its
        `turn` on the wire given back once the answer is in); False when the connection should
        end."""
        core = self._core
        robots = server.robots
        assert robots is not None  # loaded before any URL, and never unloaded
        if not robots.allowed(task.url, core.config.fetch.user_agent):
            self.unfetched([task], FetchError(ErrorClass.ROBOTS_DISALLOWED), refund_budget=True)
            return True
        # The server's limit counts under the lock: its two lanes may count at once.
        with core.lock:
            closed = core.limits.closed(server.limits, task.url)
        if closed:
            self.unfetched([task], family_errors(url_family(task.url)), refund_budget=True)
            return True
        assert server.controller is not None
        # The pace's check and the turn taken from it at once: the other lane's answer (a
        # Retry-After) may move the pace in between.
        with core.lock:
            now = time.monotonic()
            if server.controller.earliest_next() - now > LINGER_S:
                core.put_back(server, task)
                return False
            # Checked last: a URL put back above must not be counted twice. Retries were
            # admitted with their first try.
            refusal = None
            if task.attempt == 1:
                refusal = core.limits.admit(server.limits, task.url, task.host_depth, task.descent)
            start = None if refusal is not None else self._reserve_start(server, now)
        if refusal is not None:
            self.unfetched([task], refusal, refund_budget=True)
            return True
        assert start is not None
        return self.fetch(server, session, task, turn, start)

    def fetch(
        self, server: ServerState, session: ServerSession, task: UrlTask, turn: Turn, start: float
    ) -> bool:
        """Fetch one URL at its reserved `start` and act on its outcome
        (crawler/node/outcome.py); False when the connection should end."""
        core = self._core
        conditional = core.revisits.conditional_headers(task.url) if core.revisits else None
        answer = self._paced_get(server, session, task.url, conditional, turn, start)
        result = answer.result
        retry_in = self._retry.retry_delay(
            task.attempt, result.status, result.error, answer.retry_after
        )
        given_up = self._not_again(server, task, answer) if retry_in is not None else None
        if given_up is not None:
            retry_in = None
        with core.lock:
            hops = 0 if retry_in is not None else server.redirects.pop(task.url, 0)
        with self._parsing:
            outcome = outcome_of(
                result, task.attempt, retry_in, hops, core.config.fetch.max_redirects, given_up
            )
        limits, counts = core.limits, server.limits
        with core.lock:
            closes_family = outcome.failed is not None and limits.outcome(
                counts, task.url, outcome.failed
            )
            wants_shape = not result.not_modified and limits.wants_shape(counts, task.url)
            if result.not_modified:
                limits.credit(counts, task.url)  # unchanged since an earlier crawl judged it
        if closes_family:
            self._skip_family(server, url_family(task.url))
        if wants_shape and result.status is not None:
            shape = content_shape(result.body)
            with core.lock:
                limits.observe(counts, task.url, shape)
        if outcome.retry_in is not None:
            self._recorder.fetch(result, task, outcome.error)
            with core.lock:
                server.retry_later(
                    UrlTask(task.url, task.depth, task.attempt + 1),
                    time.monotonic() + outcome.retry_in,
                    late=answer.own_failure or is_slow(result.error),
                )
            self._after_failure(server, answer)
            return False
        discovered: list[tuple[str, int]] = []
        foreign: list[tuple[str, int]] = []
        if outcome.follow is not None:
            discovered = self._discovery.discover(
                [outcome.follow], task, task.depth, foreign, redirects=hops + 1
            )
        elif outcome.page is not None:
            discovered = self._discovery.discover(
                outcome.page.followed_links(core.config.content.honour_nofollow),
                task,
                task.depth + 1,
                foreign,
                canonical=True,
            )
        self._recorder.fetch_later(result, task, outcome.error, outcome.page, discovered)
        self._discovery.send_foreign(foreign)
        core.count_fetched(page=outcome.page is not None)
        self._after_failure(server, answer)
        return outcome.keep_connection

    # ---- failures: the server's, or one URL's (crawler/scheduling/failures.py) ---------------

    def _not_again(self, server: ServerState, task: UrlTask, answer: Answer) -> str | None:
        """Why a retryable failure is not tried again, if it is not: the server's failure
        budget is spent, or the URL's own pushback asked again for longer than a retry waits
        (it had its one retry after `retry_after_max_s`)."""
        retry = self._core.config.retry
        if server.failures.spent(retry.failure_budget_s):
            return server.failures.budget_reason(retry.failure_budget_s)
        asked = answer.asked_s
        if (
            answer.own_failure
            and task.attempt > 1
            and asked is not None
            and asked > retry.retry_after_max_s
        ):
            return f"asked again to wait {asked:.0f} s, longer than retry_after_max_s"
        return None

    def _after_failure(self, server: ServerState, answer: Answer) -> None:
        """The answer spent the server's failure budget: its URLs waiting for a retry are
        given up, each with its row."""
        if answer.spent_budget:
            with self._core.lock:
                tasks = server.drain_retries()
            budget_s = self._core.config.retry.failure_budget_s
            reason = server.failures.budget_reason(budget_s)
            self.unfetched(tasks, FetchError(ErrorClass.GAVE_UP, reason))

    # ---- what a connection needs besides pages ----------------------------------------------

    def _address_refusal(self, server: ServerState, session: ServerSession) -> FetchError | None:
        """Why the server's URLs cannot be fetched at all (its address refused, its name
        unknown), or None."""
        if server.refused is None:
            try:
                session.pin(self._guard.check_url(f"{server.scheme}://{server.host}/"))
            except AddressRefused as exc:
                server.refused = str(exc)
            except OSError as exc:
                # No such name: its URLs fail now. A resolver that did not answer may answer
                # the next time: each fetch records its own network error.
                return unresolvable(server.host.rsplit(":", 1)[0], exc)
        if server.refused is not None:
            return FetchError(ErrorClass.ADDRESS_REFUSED, server.refused)
        return None

    def _load_robots(self, server: ServerState, session: ServerSession) -> bool:
        """Fetch the server's robots.txt; False while its rules are unknown."""
        core = self._core
        config = core.config
        robots_url = f"{server.scheme}://{server.host}/robots.txt"
        self._take_slot()
        result = session.get(robots_url)
        self._free_slot(result)
        with core.lock:
            server.stats.on_response(result.status, result.rtt_s, result.headers)
            # Usually the request that opened the connection: its handshake is the network's
            # first reading.
            if result.network_rtt_s is not None:
                assert server.controller is not None  # every owned server has one
                server.controller.on_network_rtt(result.network_rtt_s)
        self._recorder.fetch(result, UrlTask(robots_url, depth=0), result.error)
        now = time.monotonic()
        # A robots.txt that broke off midway is unknown, not short: its rules may be missing.
        status = None if result.cut_short else result.status
        problem = f"{result.error or result.status}"
        try:
            rules = RobotsRules.from_response(
                status,
                result.body.decode("utf-8", "replace"),
                now,
                config.fetch.robots_retry_s,
                config.fetch.robots_max_rules,
            )
        except Exception as exc:
            # A robots.txt that sets off a bug is one that cannot be read: tried again, then
            # the server's URLs get their rows, like a robots.txt that does not answer.
            logger.exception("reading the robots.txt of %s failed", server.host)
            rules = RobotsRules.unreachable(now, config.fetch.robots_retry_s)
            problem = str(internal_error(exc))
        if not rules.is_unreachable:
            server.robots = rules
            delay = rules.crawl_delay(config.fetch.user_agent)
            if delay:
                assert server.controller is not None
                server.controller.set_floor_delay(delay)
            if config.fetch.sitemaps:
                self._read_sitemaps(server, session)
            return True
        # 5xx, 429 or no answer: the rules are unknown, so nothing is fetched until they are;
        # after as many tries as a URL gets, the server's URLs are recorded as failed.
        server.robots_failures += 1
        if server.robots_failures > core.config.retry.max_retries:
            error = FetchError(ErrorClass.ROBOTS_UNAVAILABLE, problem)
            self._fail_queued(server, error)
        else:
            server.paused_until = rules.retry_at or now
        return False

    def _read_sitemaps(self, server: ServerState, session: ServerSession) -> None:
        """The server's sitemaps (crawler/fetching/sitemaps.py), fetched over its connection at its
        pace, seed its queue; the last sitemap fetch's row carries the URLs they added."""
        core = self._core
        assert server.robots is not None
        fetched: list[FetchResult] = []

        def fetch(url: str) -> FetchResult:
            if core.stopping:  # the deadline or the end of the crawl: no more sitemaps
                return FetchResult(url, error=FetchError(ErrorClass.STOPPED))
            if not server.robots or not server.robots.allowed(url, core.config.fetch.user_agent):
                return FetchResult(url, error=FetchError(ErrorClass.ROBOTS_DISALLOWED))
            result = self._paced_get(server, session, url).result
            fetched.append(result)
            return result

        origin = f"{server.scheme}://{server.host}"
        failure: FetchError | None = None
        try:
            entries = read_sitemaps(
                server.host,
                sitemap_urls(origin, server.robots.sitemaps),
                fetch,
                core.config.fetch.sitemap_max_entries,
                core.config.fetch.sitemap_max_entries_per_server,
            )
            added = self._discovery.queue_sitemap_entries(server, entries)
        except Exception as exc:
            # A sitemap that sets off a bug costs the sitemaps (the last one fetched gets the
            # error in its row), not the server's crawl.
            logger.exception("reading the sitemaps of %s failed", server.host)
            failure, added = internal_error(exc), []
        for number, result in enumerate(fetched, 1):
            last = number == len(fetched)
            task = UrlTask(result.url, depth=0)
            error = failure if last and failure is not None else result.error
            self._recorder.fetch(result, task, error, None, added if last else None)

    # ---- shared steps -----------------------------------------------------------------------

    def next_task(self, server: ServerState) -> UrlTask | None:
        core = self._core
        with core.lock:
            if core.stopping or server.host in self._handover.leaving:
                return None
            return core.take_task(server, time.monotonic())

    def _idle_wait(self) -> float:
        ready = self._core.frontier.next_ready_time()
        if ready is None:
            return 0.5
        return min(0.5, max(0.001, ready - time.monotonic()))

    def _take_slot(self) -> None:
        """Wait until the node's in-flight limit (mode "rtt") lets one more request go."""
        if self._in_flight is None:
            return
        core = self._core
        with core.lock:
            while not self._in_flight.may_start() and not core.stopping:
                core.lock.wait(timeout=0.05)
            self._in_flight.start()

    def _free_slot(self, result: FetchResult) -> None:
        if self._in_flight is None:
            return
        with self._core.lock:
            self._in_flight.finish(time.monotonic(), result.rtt_s or 0.0, result.status)
            self._core.lock.notify_all()

    def _paced_get(
        self,
        server: ServerState,
        session: ServerSession,
        url: str,
        conditional: dict[str, str] | None = None,
        turn: Turn | None = None,
        start: float | None = None,
    ) -> Answer:
        """One request at the server's pace, counted by the in-flight limit and the server's
        rate controller and by its failure ledger, which also sets its time limit; a failure
        that is the URL's own does not pause the server. `start`: its turn of the pace, taken
        already (`attempt`), else taken here; either way under the lock before waiting for it,
        so that the server's two lanes each get a turn of their own. `turn`: the lane's slot
        on the wire, given back once the controller has the answer."""
        core = self._core
        controller = server.controller
        assert controller is not None
        retry = core.config.retry
        if start is None:
            with core.lock:
                start = self._reserve_start(server, time.monotonic())
        started = start
        wait = started - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        self._take_slot()  # mode "rtt": counted from the send, not while waiting for the pace
        with core.lock:
            fetch = core.config.fetch
            time_limit = server.failures.time_limit(
                url, fetch.fetch_timeout_s, fetch.connect_timeout_s, retry.failure_budget_s
            )
        result = session.get(url, conditional, time_limit)
        self._free_slot(result)
        now = time.monotonic()
        asked = parse_retry_after(result.headers.get("retry-after"), time.time(), math.inf)
        retry_after = None if asked is None else min(asked, retry.retry_after_max_s)
        with core.lock:
            failures = server.failures
            own = is_failure(result.status, result.error) and failures.about_url(url)
            spent = failures.record(
                url, result.status, result.error, now - started, retry.failure_budget_s
            )
            # The wire time where there is one: the client's own work is no server's load.
            rtt_s = result.wire_rtt_s or result.rtt_s or (now - started)
            if result.network_rtt_s is not None:
                controller.on_network_rtt(result.network_rtt_s)
            slow = is_slow(result.error)
            if not (own and slow):  # a URL's own slow failure says nothing of the server's pace
                # An answer cut off (a hang, a drip, a reset) is no page to the controller:
                # its time is the failure's, not a measure of how fast the server serves. A
                # URL's own 429/503 still slows the pace (a token bucket answers some requests
                # and refuses others), but its Retry-After holds only that URL.
                status = None if slow else result.status
                controller.on_response(now, rtt_s, status, None if own else retry_after)
            server.stats.on_response(result.status, result.rtt_s, result.headers)
            core.server_answered(server.host)
        if turn is not None:
            turn.end()  # the answer is in and the controller has it: the other lane may send
        return Answer(result, retry_after, asked, own, spent)

    def _reserve_start(self, server: ServerState, now: float) -> float:
        """The next turn of the server's pace, taken: its start. Under the lock."""
        controller = server.controller
        assert controller is not None
        start = max(now, controller.earliest_next())
        controller.on_backlog(server.pending())
        controller.on_request_start(start)
        return start

    # ---- URLs not fetched -------------------------------------------------------------------

    def _fail_queued(self, server: ServerState, error: FetchError) -> None:
        """Record every URL queued for a server that cannot be crawled as failed."""
        with self._core.lock:
            tasks = server.drain()
        self.unfetched(tasks, error)

    def _skip_family(self, server: ServerState, family: str) -> None:
        """A family of the server kept failing: its queued URLs are recorded as skipped, in
        one go (a page of 100,000 dead links costs a few requests and one batch of rows)."""
        with self._core.lock:
            tasks = server.drain_family(family)
        self.unfetched(tasks, family_errors(family))

    def unfetched(
        self, tasks: list[UrlTask], error: FetchError = DEADLINE, refund_budget: bool = False
    ) -> None:
        """Rows for URLs not fetched (refused, skipped, the deadline), as one batch.
        `refund_budget`: the URLs were taken from their server for a request (refused just
        before it), so the pages their first tries took come back since nothing was fetched."""
        if not tasks:
            return
        self._recorder.unfetched(tasks, error)
        core = self._core
        with core.lock:
            if refund_budget:
                core.refund_budget(tasks)
            for task in tasks:
                if (server := core.servers.get(server_of(task.url))) is not None:
                    server.redirects.pop(task.url, None)
            core.count_unfetched(len(tasks))
