"""The `[rate_control]` settings: which law paces each server, and the knobs of every law.

Checked as every section is (`crawler.section.Section`: strict types, unknown keys are errors).
The retry budget and host pauses are the `[retry]` section
(`crawler.fetching.politeness.RetrySettings`);
a config file naming one of their keys here gets an error that says so (crawler/config.py).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from crawler.section import Section

Mode = Literal["adaptive", "pid", "rtt", "fixed"]
MODES: tuple[str, ...] = get_args(Mode)


class RateControlSettings(Section):
    """Every rate-control setting, with the defaults used when a key is absent.

    Gains of the PID follow SPEC section 1's sign convention (negative: too fast means a
    longer delay) and are stated per 60-second window; see `crawler.ratecontrol.pid`.
    """

    mode: Mode = Field("adaptive", description=f"the control law: {', '.join(MODES)}")
    target_ppm: float | None = Field(
        None, gt=0, description="pages/min per server; required by pid"
    )
    fixed_delay_s: float | None = Field(
        None, ge=0, description="fixed: this delay, else 60 / target_ppm"
    )

    # Bounds and start of every controller's delay (seconds, start to start).
    initial_delay_s: float = Field(1.0, gt=0)
    min_delay_s: float = Field(0.0, ge=0)
    max_delay_s: float = Field(60.0, gt=0)

    # PID (SPEC section 1).
    window_s: float = Field(60.0, gt=0, description="control window")
    kp: float = Field(-0.045, lt=0, description="too fast must lengthen the delay")
    ki: float = Field(0.0, le=0, description="same sign as kp")
    kd: float = Field(-0.005, le=0, description="same sign as kp")
    smoothing: float = Field(
        1.0, gt=0, le=1, description="EWMA weight of the newest window's count; 1: none"
    )
    pid_reference_ppm: float | None = Field(
        40.0,
        gt=0,
        description="the gains hold for this target and are scaled by (it / target_ppm)**2; "
        "None: as given",
    )

    # RTT band and concurrency controller (SPEC section 2).
    rtt_alpha: float = Field(
        0.125, gt=0, le=1, description="the smoothing factor a; 1/8 as in TCP's SRTT"
    )
    rtt_interval_s: float = Field(2.0, gt=0, description="TIME_INTERVAL")
    rtt_min_s: float = Field(0.005, ge=0, description="RTT_MIN: faster answers raise the cap")
    rtt_max_s: float = Field(2.0, ge=0, description="RTT_MAX: slower answers lower the cap")
    rtt_increase: int = Field(1, ge=1, description="INCREASE")
    rtt_decrease: int = Field(1, ge=1, description="DECREASE")
    rtt_initial_cap: int = Field(4, ge=1)
    rtt_min_cap: int = Field(1, ge=1)
    rtt_max_cap: int = Field(8, ge=1)

    # Adaptive controller, loss side (servers answering 429/503).
    slow_start_doubling_s: float = Field(
        0.5, gt=0, description="before the first ban the rate doubles this often"
    )
    ban_target_share: float = Field(
        0.92, gt=0, le=1, description="settle at this share of the rate that drew the last ban"
    )
    served_target_share: float = Field(
        0.97, gt=0, le=1, description="...or of the rate served between the last two bans"
    )
    ban_backoff: float = Field(0.5, gt=0, lt=1, description="rate multiplier on a ban")
    approach_gain: float = Field(
        0.05, gt=0, le=1, description="share of the gap to the target closed per clean response"
    )
    probe_every: int = Field(
        200, ge=1, description="clean responses at the target before probing above it"
    )
    probe_step: float = Field(
        0.02, gt=0, description="the first probe raises the ban-rate estimate by this share"
    )
    # Adaptive controller, delay side (servers that slow down instead of refusing).
    rtt_target: float = Field(
        1.5,
        gt=1,
        description="the page RTT's bound as a multiple of the unloaded RTT; held under it by "
        "rtt_confidence standard errors of the unloaded RTT",
    )
    rtt_confidence: float = Field(
        0.5, ge=0, description="margin under rtt_target, in standard errors of log U"
    )
    rtt_noise_s: float = Field(
        0.005, ge=0, description="queueing delay below this is never a brake (client jitter)"
    )
    rtt_gain: float = Field(
        0.03, gt=0, le=1, description="log-rate step per response per unit of log error"
    )
    # Until a server has shown it is fast, wait at least this many RTTs after each response
    # (as Heritrix's delayFactor, 5 there): its connection is busy at most 1/(1+2) of the time,
    # and the RTTs of requests sent that idle give its unloaded RTT, known from `base_samples`
    # of them (more come in over the crawl: see crawler.ratecontrol.queueing).
    unproven_delay_factor: float = Field(2.0, gt=0)
    base_samples: int = Field(16, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> RateControlSettings:
        checks = [
            (self.min_delay_s <= self.max_delay_s, "need min_delay_s <= max_delay_s"),
            (
                self.min_delay_s <= self.initial_delay_s <= self.max_delay_s,
                "initial_delay_s must be within [min_delay_s, max_delay_s]",
            ),
            (self.rtt_min_s <= self.rtt_max_s, "need rtt_min_s <= rtt_max_s"),
            (
                self.rtt_min_cap <= self.rtt_initial_cap <= self.rtt_max_cap,
                "need rtt_min_cap <= rtt_initial_cap <= rtt_max_cap",
            ),
            (self.mode != "pid" or self.target_ppm is not None, "mode 'pid' needs target_ppm"),
            (
                self.mode != "fixed"
                or self.target_ppm is not None
                or self.fixed_delay_s is not None,
                "mode 'fixed' needs fixed_delay_s or target_ppm",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        return self
