"""Unit tests of crawler.ratecontrol: settings, the shared politeness layer, PID and RTT laws.

Nothing here sleeps or opens a socket: every controller takes time as an argument, and the
servers are small event simulations driven by seeded RNGs, so every number is reproducible.
"""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

import pytest

from crawler.config import ConfigError, config_from_dict, read_config_file, with_overrides
from crawler.fetching.headers import parse_retry_after
from crawler.fetching.politeness import RetrySettings
from crawler.ratecontrol import (
    CONTROLLERS,
    MODES,
    TRACE_FIELDS,
    AdaptiveRateController,
    FixedDelayController,
    HostRateController,
    PIDDelayController,
    RateControlSettings,
    RTTBand,
    RTTConcurrencyController,
    make_host_controller,
)
from crawlflow.cli import main

RETRY = RetrySettings()

# ---- configuration ---------------------------------------------------------------------------


def test_config_defaults_are_the_adaptive_mode() -> None:
    config = RateControlSettings.model_validate({})
    assert config.mode == "adaptive"
    assert config.target_ppm is None
    assert isinstance(make_host_controller(config, RETRY, 0.0), AdaptiveRateController)


def test_registry_has_a_law_for_every_mode() -> None:
    assert set(CONTROLLERS) == set(MODES)


@pytest.mark.parametrize(
    ("data", "cls"),
    [
        ({"mode": "adaptive"}, AdaptiveRateController),
        ({"mode": "pid", "target_ppm": 40}, PIDDelayController),
        ({"mode": "rtt"}, RTTConcurrencyController),
        ({"mode": "fixed", "target_ppm": 30}, FixedDelayController),
        ({"mode": "fixed", "fixed": {"delay_s": 0.5}}, FixedDelayController),
    ],
)
def test_factory_builds_each_mode(data: dict, cls: type) -> None:
    controller = make_host_controller(RateControlSettings.model_validate(data), RETRY, 5.0)
    assert isinstance(controller, cls)
    assert isinstance(controller, HostRateController)
    assert controller.earliest_next() == 5.0  # a new host may be asked at once
    row = controller.trace(5.0)
    assert tuple(row) == TRACE_FIELDS


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"mod": "pid"}, "unknown key rate_control.mod (did you mean mode?)"),
        ({"mode": "fast"}, "rate_control.mode: Input should be 'adaptive', 'pid', 'rtt' or"),
        ({"mode": "pid"}, 'rate_control.mode "pid" needs rate_control.target_ppm'),
        (
            {"mode": "fixed"},
            'rate_control.mode "fixed" needs rate_control.fixed.delay_s or rate_control.target_ppm',
        ),
        (
            {"mode": "pid", "target_ppm": 40, "pid": {"kp": 0.05}},
            "rate_control.pid.kp: Input should be less than 0",
        ),
        (
            {"mode": "pid", "target_ppm": 40, "pid": {"kp": "-0.05"}},
            "rate_control.pid.kp: Input should be a valid number",
        ),
        (
            {"mode": "rtt", "rtt": {"increase": True}},
            "rate_control.rtt.increase: Input should be a valid integer",
        ),
        (
            {"adaptive": {"base_samples": 2.5}},
            "rate_control.adaptive.base_samples: Input should be a valid integer",
        ),
        (
            {"mode": "rtt", "rtt": {"max_cap": None}},
            "rate_control.rtt.max_cap: Input should be a valid integer",
        ),
        ({"target_ppm": -1}, "rate_control.target_ppm: Input should be greater than 0"),
        ({"min_delay_s": 5, "max_delay_s": 1}, "min_delay_s <= max_delay_s"),
        (
            {"mode": "pid", "target_ppm": 40, "pid": {"window_s": float("nan")}},
            "rate_control.pid.window_s: Input should be a finite number",
        ),
        (
            {"mode": "pid", "target_ppm": 40, "pid": {"smoothing": 0}},
            "rate_control.pid.smoothing: Input should be greater than 0",
        ),
        (
            {"mode": "rtt", "rtt": {"min_cap": 5, "initial_cap": 4}},
            "rate_control.rtt: need min_cap <= initial_cap <= max_cap",
        ),
        (
            {"adaptive": {"ban_backoff": 1.0}},
            "rate_control.adaptive.ban_backoff: Input should be less than 1",
        ),
    ],
)
def test_config_rejects_bad_input_with_one_line(data: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"rate_control": data})
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("key", ["max_retries", "retry_after_max_s", "backoff_base_s"])
def test_retry_keys_under_rate_control_name_their_new_place(key: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"rate_control": {"mode": "adaptive", key: 1}})
    message = str(info.value)
    assert message == f"invalid config: rate_control.{key} moved to [retry]"
    assert "\n" not in message
    assert config_from_dict({"retry": {key: 1}}).retry == RetrySettings.model_validate({key: 1})


# Every key of a law at the top of [rate_control] (before each law had its sub-table) and its
# place now.
FLAT_RATE_CONTROL_KEYS = {
    "window_s": ("pid", "window_s"),
    "kp": ("pid", "kp"),
    "ki": ("pid", "ki"),
    "kd": ("pid", "kd"),
    "smoothing": ("pid", "smoothing"),
    "pid_reference_ppm": ("pid", "reference_ppm"),
    "rtt_min_s": ("rtt", "rtt_min_s"),
    "rtt_max_s": ("rtt", "rtt_max_s"),
    "rtt_increase": ("rtt", "increase"),
    "rtt_decrease": ("rtt", "decrease"),
    "rtt_initial_cap": ("rtt", "initial_cap"),
    "rtt_min_cap": ("rtt", "min_cap"),
    "rtt_max_cap": ("rtt", "max_cap"),
    "slow_start_doubling_s": ("adaptive", "slow_start_doubling_s"),
    "ban_target_share": ("adaptive", "ban_target_share"),
    "served_target_share": ("adaptive", "served_target_share"),
    "ban_backoff": ("adaptive", "ban_backoff"),
    "approach_gain": ("adaptive", "approach_gain"),
    "probe_every": ("adaptive", "probe_every"),
    "probe_step": ("adaptive", "probe_step"),
    "rtt_target": ("adaptive", "rtt_target"),
    "rtt_confidence": ("adaptive", "rtt_confidence"),
    "rtt_noise_s": ("adaptive", "rtt_noise_s"),
    "rtt_gain": ("adaptive", "rtt_gain"),
    "unproven_delay_factor": ("adaptive", "unproven_delay_factor"),
    "base_samples": ("adaptive", "base_samples"),
    "fixed_delay_s": ("fixed", "delay_s"),
}


@pytest.mark.parametrize(("key", "place"), FLAT_RATE_CONTROL_KEYS.items())
def test_a_law_key_of_the_flat_rate_control_table_names_its_sub_table(
    key: str, place: tuple[str, str]
) -> None:
    law, name = place
    with pytest.raises(ConfigError) as info:
        config_from_dict({"rate_control": {"mode": law, key: 1}})
    renamed = f" as {name}" if name != key else ""
    assert str(
        info.value
    ) == f"invalid config: rate_control.{key} moved to [rate_control.{law}]" + (renamed)
    assert name in type(getattr(RateControlSettings(), law)).model_fields


def test_every_setting_of_the_old_flat_table_has_a_place() -> None:
    # The flat table's keys are the shared ones now at the top, and those moved to a sub-table.
    shared = {"mode", "target_ppm", "initial_delay_s", "min_delay_s", "max_delay_s"}
    shared |= {"rtt_alpha", "rtt_interval_s"}
    laws = set(MODES)
    assert set(RateControlSettings.model_fields) == shared | laws
    moved: dict[str, set[str]] = {law: set() for law in MODES}
    for law, name in FLAT_RATE_CONTROL_KEYS.values():
        moved[law].add(name)
    moved["adaptive"].add("max_in_flight")  # new since the flat table
    assert moved == {
        law: set(type(getattr(RateControlSettings(), law)).model_fields) for law in laws
    }


# A knob of each law, set to other than its default.
A_KNOB = {
    "adaptive": {"probe_every": 100},
    "pid": {"kp": -0.05},
    "rtt": {"max_cap": 6},
    "fixed": {"delay_s": 0.5},
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("law", MODES)
def test_only_the_sub_table_of_the_chosen_law_may_be_set(mode: str, law: str) -> None:
    data = {"mode": mode, "target_ppm": 40} if mode in ("pid", "fixed") else {"mode": mode}
    data[law] = A_KNOB[law]
    if law == mode:
        assert config_from_dict({"rate_control": data}).rate_control.mode == mode
        return
    with pytest.raises(ConfigError) as info:
        config_from_dict({"rate_control": data})
    assert str(info.value) == (
        f'invalid config: rate_control.{law} is set but rate_control.mode is "{mode}"'
    )


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"mode": "adaptive", "target_ppm": 40}, "target_ppm"),
        ({"mode": "rtt", "target_ppm": 40}, "target_ppm"),
        ({"mode": "fixed", "target_ppm": 40, "initial_delay_s": 2.0}, "initial_delay_s"),
        ({"mode": "fixed", "target_ppm": 40, "max_delay_s": 2.0}, "max_delay_s"),
    ],
)
def test_a_shared_key_the_chosen_law_does_not_read_is_an_error(data: dict, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_dict({"rate_control": data})
    mode = data["mode"]
    assert str(info.value) == (
        f'invalid config: rate_control.{key} is set but rate_control.mode "{mode}" does not read it'
    )


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"mode": "pid", "target_ppm": 40, "pid": A_KNOB["pid"]},
        {"mode": "rtt", "rtt": A_KNOB["rtt"]},
        {"mode": "fixed", "fixed": A_KNOB["fixed"]},
    ],
)
def test_settings_dumped_whole_load_again(data: dict) -> None:
    # What the Prefect UI's form sends holds every key, the other laws' tables at their
    # defaults: those are not set.
    settings = RateControlSettings.model_validate(data)
    assert RateControlSettings.model_validate(settings.model_dump()) == settings
    config = config_from_dict({"rate_control": data})
    assert config_from_dict(config.model_dump()) == config


def test_each_law_reads_its_sub_table() -> None:
    pid = make_host_controller(
        RateControlSettings(mode="pid", target_ppm=40, pid={"kp": -0.09, "window_s": 30}),
        RETRY,
        0.0,
    )
    assert pid.kp == pytest.approx(-0.09 * 0.5)
    rtt = make_host_controller(
        RateControlSettings(mode="rtt", rtt={"initial_cap": 3, "max_cap": 5}), RETRY, 0.0
    )
    assert (rtt.cap, rtt.limit.max_cap) == (3, 5)
    adaptive = make_host_controller(
        RateControlSettings(adaptive={"unproven_delay_factor": 4.0}), RETRY, 0.0
    )
    adaptive.on_request_start(0.0)
    adaptive.on_response(0.1, 0.1, 200, None)
    assert adaptive.current_delay() == pytest.approx(0.1 * (1 + 4.0))
    fixed = make_host_controller(
        RateControlSettings(mode="fixed", fixed={"delay_s": 0.3}), RETRY, 0
    )
    assert fixed.current_delay() == 0.3


def test_config_file_sections_and_command_line_overrides(tmp_path: Path) -> None:
    path = tmp_path / "crawl.toml"
    path.write_text(
        '[rate_control]\nmode = "pid"\ntarget_ppm = 30.0\n[rate_control.pid]\nwindow_s = 5.0\n'
        "[retry]\nmax_retries = 1\n"
    )
    config = config_from_dict(read_config_file(path))
    assert (config.rate_control.mode, config.rate_control.pid.window_s) == ("pid", 5.0)
    assert config.retry.max_retries == 1
    # --target-ppm 40 over the file's section; the rest of it stays.
    options = {"rate_control": {"target_ppm": 40.0}}
    overridden = config_from_dict(with_overrides(read_config_file(path), options))
    assert (overridden.rate_control.mode, overridden.rate_control.target_ppm) == ("pid", 40.0)
    assert overridden.rate_control.pid.window_s == 5.0
    assert overridden.retry.max_retries == 1
    assert isinstance(make_host_controller(overridden.rate_control, RETRY, 0.0), PIDDelayController)
    # --rate-control fixed over a file tuned for pid: the pid table would be ignored, so it is
    # an error.
    options = {"rate_control": {"mode": "fixed"}}
    with pytest.raises(
        ConfigError, match='rate_control.pid is set but rate_control.mode is "fixed"'
    ):
        config_from_dict(with_overrides(read_config_file(path), options))


def test_a_retry_key_in_the_rate_control_table_is_one_line_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "crawl.toml"
    path.write_text('[rate_control]\nmode = "adaptive"\nmax_retries = 2\n')
    with pytest.raises(SystemExit) as exit_info:
        main(["crawl", "--config", str(path), "http://example.com/"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(err.strip().splitlines()) == 1, err
    expected = "invalid config: rate_control.max_retries moved to [retry]"
    assert err.strip() == f"crawlflow: error: {expected}"


def test_config_accepts_ints_for_floats() -> None:
    config = RateControlSettings.model_validate(
        {"mode": "pid", "target_ppm": 40, "pid": {"window_s": 5}}
    )
    assert config.pid.window_s == 5


def test_fixed_delay_from_target_or_explicit() -> None:
    from_target = make_host_controller(RateControlSettings(mode="fixed", target_ppm=30), RETRY, 0.0)
    explicit = make_host_controller(
        RateControlSettings(mode="fixed", target_ppm=30, fixed={"delay_s": 0.25}), RETRY, 0.0
    )
    assert from_target.trace(0.0)["delay_s"] == 2.0
    assert explicit.trace(0.0)["delay_s"] == 0.25


# ---- the shared politeness layer, for every mode ---------------------------------------------

ALL_MODES = [
    {"mode": "adaptive"},
    {"mode": "pid", "target_ppm": 6000},
    {"mode": "rtt"},
    {"mode": "fixed", "fixed": {"delay_s": 0.01}},
]


@pytest.mark.parametrize("data", ALL_MODES)
def test_crawl_delay_is_a_hard_floor(data: dict) -> None:
    controller = make_host_controller(RateControlSettings.model_validate(data), RETRY, 0.0)
    controller.set_floor_delay(0.75)
    now = 0.0
    starts = []
    for _ in range(200):
        now = max(now, controller.earliest_next())
        starts.append(now)
        controller.on_request_start(now)
        now += 0.005
        controller.on_response(now, 0.005, 200, None)
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert min(gaps) >= 0.75 - 1e-9


@pytest.mark.parametrize("data", ALL_MODES)
def test_retry_after_pauses_the_host(data: dict) -> None:
    controller = make_host_controller(RateControlSettings.model_validate(data), RETRY, 0.0)
    controller.on_request_start(0.0)
    controller.on_response(0.01, 0.01, 429, 30.0)
    assert controller.earliest_next() >= 30.01
    assert controller.trace(0.02)["bans"] == 1


@pytest.mark.parametrize("data", ALL_MODES)
def test_retry_after_is_clamped(data: dict) -> None:
    retry = RetrySettings(retry_after_max_s=5.0)
    controller = make_host_controller(RateControlSettings.model_validate(data), retry, 0.0)
    controller.on_request_start(0.0)
    retry_after = parse_retry_after("3600", 0.0, retry.retry_after_max_s)  # as the node reads it
    controller.on_response(0.01, 0.01, 503, retry_after)
    assert 5.0 <= controller.earliest_next() <= 5.01 + 1.0


@pytest.mark.parametrize("data", ALL_MODES)
def test_runs_of_errors_back_off_but_one_error_does_not(data: dict) -> None:
    retry = RetrySettings(backoff_base_s=1.0, backoff_cap_s=8.0)
    controller = make_host_controller(RateControlSettings.model_validate(data), retry, 0.0)
    now = 0.0
    pauses = []
    for _ in range(6):
        now = max(now, controller.earliest_next())
        controller.on_request_start(now)
        now += 0.01
        controller.on_response(now, 0.01, None, None)
        pauses.append(controller.earliest_next() - now)
    assert pauses[0] < 1.0  # one failure is the page's problem
    assert pauses[1:] == pytest.approx([1.0, 2.0, 4.0, 8.0, 8.0], abs=1.0)
    # A page ends the run.
    now = controller.earliest_next()
    controller.on_request_start(now)
    controller.on_response(now + 0.01, 0.01, 200, None)
    controller.on_request_start(now + 2)
    controller.on_response(now + 2.01, 0.01, 500, None)
    assert controller.earliest_next() - (now + 2.01) < 1.0


@pytest.mark.parametrize("data", ALL_MODES)
def test_trace_counts_since_previous_call(data: dict) -> None:
    controller = make_host_controller(RateControlSettings.model_validate(data), RETRY, 0.0)
    for i, status in enumerate([200, 404, 429, 200, None]):
        controller.on_request_start(i * 0.1)
        controller.on_response(i * 0.1 + 0.02, 0.02, status, None)
    row = controller.trace(1.0)
    assert row["pages"] == 3  # 200, 404, 200; the ban and the network error are not pages
    assert row["bans"] == 1
    assert row["srtt_ms"] == pytest.approx(20.0)
    assert row["delay_s"] is not None and row["delay_s"] >= 0
    again = controller.trace(1.1)
    assert again["pages"] == 0 and again["bans"] == 0


# ---- PID (docs/rate-control.md) ---------------------------------------------------------------


def p_only(
    initial_delay_s: float = 1.0, max_delay_s: float = 60.0, **gains: float
) -> RateControlSettings:
    """A P-only controller at 40 pages/min; `gains`: keys of [rate_control.pid]."""
    return RateControlSettings(
        mode="pid",
        target_ppm=40.0,
        initial_delay_s=initial_delay_s,
        max_delay_s=max_delay_s,
        pid={"kp": -0.05, "ki": 0.0, "kd": 0.0, **gains},
    )


def test_pid_worked_example_exactly() -> None:
    pid = PIDDelayController(p_only(), RETRY, 0.0)
    assert pid.update(100) == pytest.approx(4.0, abs=1e-12)
    assert pid.update(30) == pytest.approx(3.5, abs=1e-12)


def test_pid_counts_a_one_minute_window_through_events() -> None:
    pid = PIDDelayController(p_only(initial_delay_s=0.6), RETRY, 0.0)
    # 100 pages in the first minute, each sent exactly when the controller allowed.
    for _ in range(100):
        start = pid.earliest_next()
        pid.on_request_start(start)
        pid.on_response(start + 0.001, 0.001, 200, None)
    assert pid.delay_s == 0.6  # the window is not over yet
    row = pid.trace(60.0)
    assert pid.last_n == pytest.approx(100.0)
    assert row["delay_s"] == pytest.approx(0.6 + 3.0)  # the worked example's step
    assert row["target_ppm"] == 40.0


def test_pid_scales_late_sending_out_of_the_count() -> None:
    pid = PIDDelayController(p_only(initial_delay_s=0.5), RETRY, 0.0)
    # The node sends every 0.6 s although 0.5 s was allowed: 100 pages in 60 s, but only
    # 50 s of them were paced by the controller, so the controller's rate is 120/min.
    for i in range(100):
        start = i * 0.6
        pid.on_request_start(start)
        pid.on_response(start + 0.001, 0.001, 200, None)
    pid.trace(60.0)
    assert pid.last_n == pytest.approx(120.0, rel=1e-3)


def test_pid_delay_is_clamped_and_never_negative() -> None:
    pid = PIDDelayController(p_only(initial_delay_s=0.5, max_delay_s=5.0), RETRY, 0.0)
    assert pid.update(0) == 0.0  # 0.5 - 0.05*40 would be -1.5
    assert pid.update(1000) == 5.0


def test_pid_stops_integrating_while_saturated() -> None:
    config = p_only(ki=-0.01, max_delay_s=5.0, initial_delay_s=5.0)
    pid = PIDDelayController(config, RETRY, 0.0)
    for _ in range(50):
        assert pid.update(400) == 5.0  # far too fast, but the delay is already at its maximum
    # Without conditional integration the error sum would hold 50 * -360 and keep the delay
    # pinned for dozens of windows once the rate drops; here it leaves the bound at once.
    assert pid.update(10) == pytest.approx(5.0 - 0.05 * 30 - 0.01 * 30)


def test_pid_floor_is_crawl_delay_and_fetch_time() -> None:
    pid = PIDDelayController(p_only(initial_delay_s=2.0), RETRY, 0.0)
    pid.set_floor_delay(1.5)
    pid.on_request_start(0.0)
    pid.on_response(0.3, 0.3, 200, None)
    assert pid.bounds() == (1.5, 60.0)
    assert pid.update(0) == 1.5  # a delay under the floor would only wind up


def test_pid_gains_scale_with_the_window() -> None:
    pid = PIDDelayController(p_only(window_s=6.0), RETRY, 0.0)
    # kp is per minute: a 6 s window takes a tenth of the step.
    assert pid.update(100) == pytest.approx(1.0 + 0.3)


def test_pid_ignores_windows_in_which_it_did_not_pace() -> None:
    pid = PIDDelayController(p_only(window_s=10.0, initial_delay_s=2.0), RETRY, 0.0)
    pid.on_request_start(0.0)
    pid.on_response(0.1, 0.1, 200, None)
    # The node sends nothing for a minute (no URLs queued): that says nothing about the
    # delay, so it must not be shortened toward zero.
    pid.on_request_start(65.0)
    pid.on_response(65.1, 0.1, 200, None)
    assert pid.delay_s == 2.0
    # A Retry-After pause is excluded too.
    pid.on_request_start(67.1)
    pid.on_response(67.2, 0.1, 429, 30.0)
    pid.trace(95.0)
    assert pid.delay_s == 2.0


def test_pid_idle_windows_are_skipped_in_constant_time() -> None:
    pid = PIDDelayController(p_only(window_s=1.0), RETRY, 0.0)
    pid.on_request_start(0.0)
    pid.on_response(0.1, 0.1, 200, None)
    pid.on_request_start(1e7)  # a host idle for months: no ten million loop turns
    # Only the first window (1 page in 1 s = 60/min) moved the delay, by a 60th of a minute's
    # step; the idle ones were skipped.
    assert pid.delay_s == pytest.approx(1.0 + 0.05 * 20 / 60)


def settle_window(rates: list[float], target: float, tolerance: float = 0.05) -> int | None:
    """1-based index of the first window from which every later one is within tolerance."""
    for i in range(len(rates)):
        if all(abs(n - target) <= tolerance * target for n in rates[i:]):
            return i + 1
    return None


def assert_no_sustained_oscillation(rates: list[float], target: float) -> None:
    errors = [n - target for n in rates]
    # Oscillation shows as errors that keep flipping sign with a large amplitude.
    flips = sum(a * b < 0 for a, b in zip(errors, errors[1:], strict=False))
    assert statistics.pstdev(rates) <= 0.03 * target or flips <= len(errors) // 2
    assert max(abs(e) for e in errors) <= 0.05 * target


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("fetch_slots", [1, 2])
def test_pid_documents_run_settles_within_8_windows(fetch_slots: int, seed: int) -> None:
    """The documents' recorded run: 80 pages/min in the first window at a 3.8 s delay, target
    40. The plant gives 60*slots/max(delay, fetch) pages/min with 0.5% noise; with two fetch
    slots 40 pages/min needs a 3 s delay, which is where the documents settled (2.98 s)."""
    pid = PIDDelayController(
        RateControlSettings(mode="pid", target_ppm=40, initial_delay_s=3.8), RETRY, 0
    )
    rng = random.Random(seed)
    rates = [80.0]
    for _ in range(19):
        delay = pid.update(rates[-1])
        rates.append(60 * fetch_slots / max(delay, 0.5) * (1 + rng.gauss(0, 0.005)))
    settled = settle_window(rates, 40.0)
    assert settled is not None and settled <= 8, [round(n, 1) for n in rates]
    assert_no_sustained_oscillation(rates[-10:], 40.0)
    assert pid.delay_s == pytest.approx(1.5 * fetch_slots, rel=0.05)


def simulate_pid(window_s: float, minutes: int, seed: int) -> tuple[list[float], float]:
    """One host, one connection: each request starts when the controller allows and the
    previous answer is in; fetch times are lognormal around 0.5 s. Returns pages per minute
    for each wall-clock minute, and the final delay."""
    config = RateControlSettings(
        mode="pid", target_ppm=40, initial_delay_s=3.8, pid={"window_s": window_s}
    )
    pid = PIDDelayController(config, RETRY, 0.0)
    rng = random.Random(seed)
    per_minute = [0] * minutes
    now = 0.0
    while True:
        start = max(pid.earliest_next(), now)
        if start >= minutes * 60:
            return [float(n) for n in per_minute], pid.delay_s
        pid.on_request_start(start)
        fetch = 0.5 * math.exp(rng.gauss(0, 0.05))
        now = start + fetch
        pid.on_response(now, fetch, 200, None)
        if now < minutes * 60:
            per_minute[int(now // 60)] += 1


@pytest.mark.parametrize("window_s", [60.0, 5.0, 1.0])
def test_pid_event_simulation_settles(window_s: float) -> None:
    """From a 3.8 s delay (16 pages/min) to 40 pages/min, with windows of any length."""
    rates, delay = simulate_pid(window_s, minutes=16, seed=3)
    settled = settle_window(rates, 40.0)
    assert settled is not None and settled <= 8, rates
    assert_no_sustained_oscillation(rates[-8:], 40.0)
    assert delay == pytest.approx(1.5, rel=0.1)


@pytest.mark.parametrize("target", [120.0, 300.0, 1200.0])
def test_pid_gains_are_scheduled_by_target(target: float) -> None:
    """The same run at 3x-30x the documents' target: the plant is that many squared times more
    sensitive, and the scheduled gains keep it as calm as at 40 pages/min."""
    config = RateControlSettings(mode="pid", target_ppm=target, initial_delay_s=1.9 * 60 / target)
    pid = PIDDelayController(config, RETRY, 0)
    assert pid.kp == pytest.approx(-0.045 * (40 / target) ** 2)
    rng = random.Random(0)
    rates = [target * 2 / 1.9]
    for _ in range(19):
        delay = pid.update(rates[-1])
        rates.append(120 / max(delay, 0.001) * (1 + rng.gauss(0, 0.005)))
    settled = settle_window(rates, target)
    assert settled is not None and settled <= 8, [round(n) for n in rates]
    assert_no_sustained_oscillation(rates[-10:], target)


def test_pid_gains_as_given_without_reference() -> None:
    config = RateControlSettings(
        mode="pid", target_ppm=300, pid={"reference_ppm": None, "window_s": 60}
    )
    assert PIDDelayController(config, RETRY, 0).kp == -0.045


# ---- RTT concurrency (docs/rate-control.md) ---------------------------------------------------


def rtt_config(**overrides: float) -> RateControlSettings:
    """Mode rtt; `overrides`: keys of [rate_control.rtt]."""
    law = {"rtt_min_s": 0.001, "rtt_max_s": 5.0, "initial_cap": 10, "min_cap": 2, "max_cap": 12}
    return RateControlSettings(
        mode="rtt", rtt_alpha=0.5, rtt_interval_s=10.0, rtt={**law, **overrides}
    )


def test_rtt_band_rolls_over_per_interval() -> None:
    band = RTTBand(alpha=0.5, interval_s=10.0, now=0.0)
    band.observe(1.0, 0.100)
    band.observe(2.0, 0.200)  # S = 0.15
    assert (band.low, band.high) == (None, None)  # the first interval has no band
    band.observe(11.0, 0.150)  # rolls: the band is interval 1's min and max of S
    assert (band.low, band.high) == pytest.approx((0.100, 0.150))
    assert band.srtt == pytest.approx(0.150)
    band.roll(35.0)  # interval 2 had one sample; interval 3 none: the band keeps interval 2
    assert (band.low, band.high) == pytest.approx((0.150, 0.150))
    band.roll(45.0)
    assert (band.low, band.high) == pytest.approx((0.150, 0.150))


def test_rtt_first_interval_has_no_band_only_thresholds() -> None:
    controller = RTTConcurrencyController(rtt_config(), RETRY, 0.0)
    for t, rtt in [(1, 0.1), (2, 0.3), (3, 0.05), (4, 0.2)]:
        assert controller.on_rtt(t, rtt) == 10  # no band, no threshold crossed: no change


def test_rtt_band_moves_the_cap() -> None:
    controller = RTTConcurrencyController(rtt_config(), RETRY, 0.0)
    controller.on_rtt(1.0, 0.100)
    controller.on_rtt(2.0, 0.200)  # interval 1: S in [0.100, 0.150]
    assert controller.on_rtt(11.0, 0.090) == 11  # below S_min: up
    assert controller.on_rtt(12.0, 0.120) == 11  # inside the band: unchanged
    assert controller.on_rtt(13.0, 0.160) == 10  # above S_max: down


def test_rtt_absolute_thresholds_force_changes() -> None:
    controller = RTTConcurrencyController(rtt_config(rtt_min_s=0.05, rtt_max_s=1.0), RETRY, 0.0)
    assert controller.on_rtt(1.0, 0.01) == 11  # under RTT_MIN, even without a band
    assert controller.on_rtt(2.0, 2.0) == 10  # over RTT_MAX
    controller.on_rtt(3.0, 0.5)
    # Interval 2's band is wide; R inside it still moves the cap past the thresholds.
    assert controller.on_rtt(11.0, 0.02) == 11
    assert controller.on_rtt(12.0, 1.5) == 10


def test_rtt_cap_is_clamped() -> None:
    controller = RTTConcurrencyController(rtt_config(rtt_min_s=0.05, rtt_max_s=1.0), RETRY, 0.0)
    caps = [controller.on_rtt(i * 0.1, 0.01) for i in range(10)]
    assert caps[-1] == 12 and max(caps) == 12
    caps = [controller.on_rtt(1 + i * 0.1, 3.0) for i in range(20)]
    assert caps[-1] == 2 and min(caps) == 2


def test_rtt_bans_lower_the_cap_and_do_not_feed_the_estimate() -> None:
    controller = RTTConcurrencyController(rtt_config(), RETRY, 0.0)
    controller.on_request_start(0.0)
    controller.on_response(0.2, 0.2, 200, None)
    controller.on_request_start(1.0)
    controller.on_response(1.001, 0.001, 429, None)  # a cheap refusal
    assert controller.cap == 9
    assert controller.rtt.srtt == pytest.approx(0.2)
    assert controller.trace(2.0)["concurrency_cap"] == 9


def test_rtt_per_host_delay_is_a_duty_cycle() -> None:
    controller = RTTConcurrencyController(rtt_config(initial_cap=6), RETRY, 0.0)
    assert controller.delay_s == 1.0  # initial_delay_s until an RTT is known
    controller.on_request_start(0.0)
    controller.on_response(0.1, 0.1, 200, None)
    assert controller.delay_s == pytest.approx(0.1 * 12 / 6)  # busy half of the time
    controller.limit.cap = 12
    assert controller.delay_s == pytest.approx(0.1)  # back to back
