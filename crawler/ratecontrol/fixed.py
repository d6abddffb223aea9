"""A constant delay (mode "fixed"): the baseline the feedback controllers are measured against."""

from __future__ import annotations

from crawler.fetching.politeness import RetrySettings
from crawler.ratecontrol.paced import PacedController
from crawler.ratecontrol.response_kind import ResponseKind
from crawler.ratecontrol.settings import RateControlSettings


class FixedDelayController(PacedController):
    """`[rate_control.fixed] delay_s` from one start to the next, else 60 / `target_ppm`."""

    def __init__(self, settings: RateControlSettings, retry: RetrySettings, now: float) -> None:
        super().__init__(settings, retry, now)
        # RateControlSettings guarantees one of the two in mode "fixed".
        if settings.fixed.delay_s is not None:
            self._delay = settings.fixed.delay_s
        else:
            assert settings.target_ppm is not None
            self._delay = 60.0 / settings.target_ppm

    @property
    def delay_s(self) -> float:
        return self._delay

    def _on_outcome(self, now: float, outcome: ResponseKind) -> None:
        return None  # nothing adapts; the shared layer already paused on bans
