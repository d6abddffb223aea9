"""From a mode to its control law: the one place a controller is built."""

from __future__ import annotations

from crawler.fetching.politeness import RetrySettings
from crawler.ratecontrol.adaptive import AdaptiveRateController
from crawler.ratecontrol.fixed import FixedDelayController
from crawler.ratecontrol.paced import PacedController
from crawler.ratecontrol.pid import PIDDelayController
from crawler.ratecontrol.rtt import RTTConcurrencyController
from crawler.ratecontrol.settings import Mode, RateControlSettings

CONTROLLERS: dict[Mode, type[PacedController]] = {
    "adaptive": AdaptiveRateController,
    "pid": PIDDelayController,
    "rtt": RTTConcurrencyController,
    "fixed": FixedDelayController,
}


def make_host_controller(
    settings: RateControlSettings, retry: RetrySettings, now: float
) -> PacedController:
    """A fresh controller for one host in the configured mode, created at time `now`; its host
    pauses (Retry-After, backoff after runs of failures) follow `retry`."""
    return CONTROLLERS[settings.mode](settings, retry, now)
