"""What the node loop needs from a per-server rate controller, and the rows it traces."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

# Keys of every `trace()` row, in a stable order for the metrics dataset.
TRACE_FIELDS = (
    "delay_s",
    "concurrency_cap",
    "pages",
    "target_ppm",
    "srtt_ms",
    "rtt_band_low_ms",
    "rtt_band_high_ms",
    "bans",
    "unloaded_rtt_ms",
    "in_flight_limit",
)


@runtime_checkable
class HostRateController(Protocol):
    """When may the next request to one server start? Time is monotonic seconds, passed in."""

    def earliest_next(self) -> float:
        """Monotonic time at which the next request to this host may start."""
        ...

    def on_request_start(self, now: float) -> None: ...

    def in_flight_limit(self) -> int:
        """Requests that may be in flight to this host at once (each over its own connection)."""
        ...

    def ahead_of_answers(self) -> bool:
        """Whether the pace allows the next request before the last one's answer is in."""
        ...

    def on_backlog(self, urls: int) -> None:
        """The URLs waiting for this host (queued, retries) as a request starts: how much more
        of it there is to crawl, which says whether learning its rate is worth a burst."""
        ...

    def on_response(
        self, now: float, rtt_s: float, status: int | None, retry_after_s: float | None
    ) -> None:
        """Every result of a request; `status` None is a network error."""
        ...

    def on_network_rtt(self, seconds: float) -> None:
        """The kernel's least RTT on the connection to this host so far (its handshake, and
        acknowledgements sent before the server's work): the network's round trip, which the
        server's load does not stretch."""
        ...

    def set_floor_delay(self, seconds: float) -> None:
        """robots.txt Crawl-delay: the delay never goes below this."""
        ...

    def trace(self, now: float) -> dict[str, float | None]:
        """A metrics row (keys `TRACE_FIELDS`); `pages`/`bans` count since the previous call."""
        ...
