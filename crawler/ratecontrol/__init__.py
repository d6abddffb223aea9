"""Per-server rate control: when may the next request to a server start?

The node keeps exactly one connection per server and sends requests over it one at a time, so
the only knob per server is the inter-request delay: the time from the start of one request to
the earliest start of the next. Every controller implements `HostRateController`
(`protocol`); the node loop asks `earliest_next()`, calls `on_request_start(now)` when it
sends and `on_response(...)` with every result, and calls `trace(now)` to log metrics.

One module per control law, chosen by `RateControlSettings.mode` through `registry`; each law
has its own settings sub-table (`[rate_control.<mode>]`, `settings`):

- `adaptive` (default): congestion control per server, needs no limit.
- `pid`: docs/rate-control.md, holds a user-given pages/min target.
- `rtt`: docs/rate-control.md, per server as a duty cycle; `inflight` also bounds the requests in
  flight over the whole node by the same law.
- `fixed`: a constant delay, the baseline.

All of them share the politeness layer (`paced`): robots.txt `Crawl-delay` is a hard minimum
delay, `Retry-After` on any response pauses the server, and runs of 429/503/5xx/network errors
pause it with exponential backoff (both from the `[retry]` settings). Time always comes in as
an argument (monotonic seconds), so the controllers are deterministic and tested against
simulated clocks and servers.
"""

from crawler.ratecontrol.adaptive import AdaptiveRateController
from crawler.ratecontrol.band import RTTBand
from crawler.ratecontrol.fixed import FixedDelayController
from crawler.ratecontrol.inflight import make_in_flight_limit
from crawler.ratecontrol.pid import PIDDelayController
from crawler.ratecontrol.protocol import TRACE_FIELDS, HostRateController
from crawler.ratecontrol.queueing import QueueingDelay
from crawler.ratecontrol.registry import CONTROLLERS, make_host_controller
from crawler.ratecontrol.rtt import RTTConcurrencyController
from crawler.ratecontrol.settings import (
    LAW_SETTINGS,
    MODES,
    AdaptiveSettings,
    FixedSettings,
    Mode,
    PIDSettings,
    RateControlSettings,
    RTTSettings,
)

__all__ = [
    "CONTROLLERS",
    "LAW_SETTINGS",
    "MODES",
    "TRACE_FIELDS",
    "AdaptiveRateController",
    "AdaptiveSettings",
    "FixedDelayController",
    "FixedSettings",
    "HostRateController",
    "Mode",
    "PIDDelayController",
    "PIDSettings",
    "QueueingDelay",
    "RTTBand",
    "RTTConcurrencyController",
    "RTTSettings",
    "RateControlSettings",
    "make_host_controller",
    "make_in_flight_limit",
]
