"""The `[rate_control]` settings: which law paces each server, what the laws share, and one
sub-table per law with that law's knobs (`[rate_control.adaptive]`, `[rate_control.pid]`,
`[rate_control.rtt]`, `[rate_control.fixed]`).

Checked as every section is (`crawler.section.Section`: strict types, unknown keys are errors),
and a setting the chosen law does not read is an error too: a sub-table of another law, or a
shared key that law does not read, set to other than its default. The retry budget and host
pauses are the `[retry]` section (`crawler.fetching.politeness.RetrySettings`); a config file
naming one of their keys here, or a law's key at the top of `[rate_control]` (the flat layout
before the sub-tables), gets an error naming its new place (crawler/config.py).
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, model_validator

from crawler.section import Section

Mode = Literal["adaptive", "pid", "rtt", "fixed"]
MODES: tuple[str, ...] = get_args(Mode)


class AdaptiveSettings(Section):
    """`[rate_control.adaptive]`: the default law, congestion control per server
    (crawler/ratecontrol/adaptive.py). It brakes on bans (429/503, the loss side) and on RTT
    inflation (servers that slow down instead of refusing, the delay side)."""

    # Loss side (servers answering 429/503).
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
    # Delay side (servers that slow down instead of refusing).
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
    unproven_delay_factor: float = Field(
        2.0,
        gt=0,
        description="until a server has shown it is fast, wait at least this many RTTs after "
        "each response",
    )
    base_samples: int = Field(
        16, ge=1, description="RTTs of requests sent that idle that make the unloaded RTT known"
    )
    max_in_flight: int = Field(
        2,
        ge=1,
        le=2,
        description="requests in flight to one server at once, at most: 2 gives a second "
        "connection to a server whose RTT showed that it serves the crawler's requests side by "
        "side (docs/rate-control.md); 1 keeps one request at a time",
    )


class PIDSettings(Section):
    """`[rate_control.pid]`: the target-rate law (crawler/ratecontrol/pid.py), a PID on the
    delay that holds `[rate_control] target_ppm`.

    Gains follow docs/rate-control.md's sign convention (negative: too fast means a longer delay)
    and are stated per 60-second window; see `crawler.ratecontrol.pid`.
    """

    window_s: float = Field(60.0, gt=0, description="control window, seconds")
    kp: float = Field(
        -0.045, lt=0, description="gain on the error; too fast must lengthen the delay"
    )
    ki: float = Field(0.0, le=0, description="gain on the sum of errors; same sign as kp")
    kd: float = Field(-0.005, le=0, description="gain on the change of error; same sign as kp")
    smoothing: float = Field(
        1.0, gt=0, le=1, description="EWMA weight of the newest window's count; 1: none"
    )
    reference_ppm: float | None = Field(
        40.0,
        gt=0,
        description="the gains hold for this target and are scaled by (it / target_ppm)**2; "
        "None: as given",
    )


class RTTSettings(Section):
    """`[rate_control.rtt]`: docs/rate-control.md's RTT-driven concurrency law
    (crawler/ratecontrol/rtt.py), per server as a duty cycle and over the node's requests in
    flight (crawler/ratecontrol/inflight.py)."""

    rtt_min_s: float = Field(0.005, ge=0, description="RTT_MIN: faster answers raise the cap")
    rtt_max_s: float = Field(2.0, ge=0, description="RTT_MAX: slower answers lower the cap")
    increase: int = Field(1, ge=1, description="INCREASE: the cap's step up")
    decrease: int = Field(1, ge=1, description="DECREASE: the cap's step down")
    initial_cap: int = Field(4, ge=1, description="the cap at the start")
    min_cap: int = Field(1, ge=1, description="the cap's lower bound")
    max_cap: int = Field(
        8, ge=1, description="the cap's upper bound; per server, the cap at back-to-back requests"
    )

    @model_validator(mode="after")
    def _consistent(self) -> RTTSettings:
        if self.rtt_min_s > self.rtt_max_s:
            raise ValueError("need rtt_min_s <= rtt_max_s")
        if not self.min_cap <= self.initial_cap <= self.max_cap:
            raise ValueError("need min_cap <= initial_cap <= max_cap")
        return self


class FixedSettings(Section):
    """`[rate_control.fixed]`: a constant delay per server (crawler/ratecontrol/fixed.py), the
    baseline the feedback laws are measured against."""

    delay_s: float | None = Field(
        None, ge=0, description="the delay, start to start; None: 60 / [rate_control] target_ppm"
    )


# The keys of `[rate_control]` that only some laws read (the others are read by all): setting
# one in a mode that does not read it is an error, as setting a sub-table of another law is.
_READ_BY: dict[str, tuple[Mode, ...]] = {
    "target_ppm": ("pid", "fixed"),
    "initial_delay_s": ("adaptive", "pid", "rtt"),
    "min_delay_s": ("adaptive", "pid", "rtt"),
    "max_delay_s": ("adaptive", "pid", "rtt"),
}


class RateControlSettings(Section):
    """`[rate_control]`: the law that paces each server (`mode`), the settings the laws share,
    and one sub-table per law with its own knobs; only the chosen law's sub-table may be set."""

    mode: Mode = Field("adaptive", description=f"the control law: {', '.join(MODES)}")
    target_ppm: float | None = Field(
        None,
        gt=0,
        description="pages/min per server: the pid law's target (required there), the fixed "
        "law's rate when [rate_control.fixed] delay_s is unset",
    )

    # Bounds and start of the feedback laws' delay (seconds, start to start); the fixed law's
    # delay is its own.
    initial_delay_s: float = Field(
        1.0,
        gt=0,
        description="the delay before a server's first RTT is known (adaptive, pid, rtt)",
    )
    min_delay_s: float = Field(0.0, ge=0, description="the shortest delay (adaptive, pid, rtt)")
    max_delay_s: float = Field(60.0, gt=0, description="the longest delay (adaptive, pid, rtt)")

    # The smoothed RTT (docs/rate-control.md's S) every law keeps and traces, and its band.
    rtt_alpha: float = Field(
        0.125, gt=0, le=1, description="the smoothing factor a of the RTT; 1/8 as in TCP's SRTT"
    )
    rtt_interval_s: float = Field(
        2.0, gt=0, description="TIME_INTERVAL: the RTT band is the min and max of S over this"
    )

    adaptive: AdaptiveSettings = Field(
        default_factory=AdaptiveSettings, description="the adaptive law's knobs"
    )
    pid: PIDSettings = Field(default_factory=PIDSettings, description="the pid law's knobs")
    rtt: RTTSettings = Field(default_factory=RTTSettings, description="the rtt law's knobs")
    fixed: FixedSettings = Field(default_factory=FixedSettings, description="the fixed law's knobs")

    def _is_set(self, key: str) -> bool:
        """Whether `key` holds other than its default. By value, not by presence: a dump of
        the settings (what the Prefect UI's form of a request sends) holds every key."""
        default = type(self).model_fields[key].get_default(call_default_factory=True)
        return bool(getattr(self, key) != default)

    @model_validator(mode="after")
    def _consistent(self) -> RateControlSettings:
        mode = self.mode
        for law in MODES:
            if law != mode and self._is_set(law):
                raise ValueError(f'rate_control.{law} is set but rate_control.mode is "{mode}"')
        for key, laws in _READ_BY.items():
            if mode not in laws and self._is_set(key):
                raise ValueError(
                    f'rate_control.{key} is set but rate_control.mode "{mode}" does not read it'
                )
        checks = [
            (self.min_delay_s <= self.max_delay_s, "need min_delay_s <= max_delay_s"),
            (
                self.min_delay_s <= self.initial_delay_s <= self.max_delay_s,
                "initial_delay_s must be within [min_delay_s, max_delay_s]",
            ),
            (
                mode != "pid" or self.target_ppm is not None,
                'rate_control.mode "pid" needs rate_control.target_ppm',
            ),
            (
                mode != "fixed" or self.target_ppm is not None or self.fixed.delay_s is not None,
                'rate_control.mode "fixed" needs rate_control.fixed.delay_s or '
                "rate_control.target_ppm",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        return self


# The model of each law's sub-table, by mode.
LAW_SETTINGS: dict[Mode, type[Section]] = {
    "adaptive": AdaptiveSettings,
    "pid": PIDSettings,
    "rtt": RTTSettings,
    "fixed": FixedSettings,
}
