"""The settings tree (crawler/config.py): a file of the current layout loads, every key is
described (the configuration reference is generated from the descriptions), the keys of older
layouts name their new place, an unknown key gets the closest known one, and the defaults are
those crawls ran with before the rate-control table was split and the limits got one home; and
every settings file the docs show is valid."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from crawler.config import MOVED_KEYS, ConfigError, CrawlConfig, config_from_dict
from crawler.section import Section

EXAMPLE = """
[fetch]
user_agent = "examplebot/1.0 (+https://example.org/bot)"
sitemaps = true

[limits]
max_pages = 50000
max_depth = 12
max_pages_per_host = 5000
deadline_s = 1800

[scheduling]
policy = "quality"

[rate_control]
mode = "pid"
target_ppm = 120
max_delay_s = 30

[rate_control.pid]
window_s = 5
"""


def test_a_file_of_the_current_layout_loads():
    config = config_from_dict(tomllib.loads(EXAMPLE))
    limits = config.limits
    assert (limits.max_pages, limits.max_depth, limits.deadline_s) == (50000, 12, 1800)
    rate_control = config.rate_control
    assert (rate_control.mode, rate_control.target_ppm, rate_control.pid.window_s) == (
        "pid",
        120,
        5,
    )
    assert config.scheduling.policy == "quality"


def sections(model: type[BaseModel] = CrawlConfig, path: str = "") -> dict[str, type[Section]]:
    """Every table of the tree by its dotted name, the tree itself as ""."""
    tables: dict[str, type[Section]] = {path: model}
    for name, field in model.model_fields.items():
        table = field.annotation
        if isinstance(table, type) and issubclass(table, Section):
            tables |= sections(table, f"{path}.{name}".lstrip("."))
    return tables


def test_every_key_is_described_and_every_table_says_what_it_is_for():
    tables = sections()
    assert {"rate_control.adaptive", "rate_control.pid", "rate_control.rtt"} <= set(tables)
    for path, model in tables.items():
        for name, field in model.model_fields.items():
            assert field.description, f"{path}.{name} has no description"
        if path:
            assert f"`[{path}]`" in (model.__doc__ or ""), model.__name__


def test_a_moved_key_is_not_a_key_of_its_old_table_and_its_new_place_is():
    tables = sections()
    for (table, key), (section, name) in MOVED_KEYS.items():
        assert key not in tables["" if table is None else table].model_fields, (table, key)
        assert name in tables[section].model_fields, (section, name)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"limits": {"time_budget_s": 60}}, "limits.time_budget_s is now limits.deadline_s"),
        ({"time_budget_s": 60}, "time_budget_s moved to [limits] as deadline_s"),
        ({"max_pages": 60}, "max_pages moved to [limits]"),
        ({"rate_control": {"kp": -0.05}}, "rate_control.kp moved to [rate_control.pid]"),
        (
            {"rate_control": {"pid_reference_ppm": 40}},
            "rate_control.pid_reference_ppm moved to [rate_control.pid] as reference_ppm",
        ),
        (
            {"rate_control": {"mode": "fixed", "fixed_delay_s": 0.5}},
            "rate_control.fixed_delay_s moved to [rate_control.fixed] as delay_s",
        ),
    ],
)
def test_a_key_of_an_older_layout_names_its_new_place(data, message):
    with pytest.raises(ConfigError) as error:
        config_from_dict(data)
    assert str(error.value) == f"invalid config: {message}"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"fetch": {"user_agnet": "x"}}, "unknown key fetch.user_agnet (did you mean user_agent?)"),
        ({"limit": {}}, "unknown key limit (did you mean limits?)"),
        ({"limits": {"max_page": 5}}, "unknown key limits.max_page (did you mean max_pages?)"),
        (
            {"rate_control": {"mode": "rtt", "rtt": {"max_cp": 5}}},
            "unknown key rate_control.rtt.max_cp (did you mean max_cap?)",
        ),
        ({"scheduling": {"no_such_setting": 1}}, "unknown key scheduling.no_such_setting"),
    ],
)
def test_an_unknown_key_gets_the_closest_known_one(data, message):
    with pytest.raises(ConfigError) as error:
        config_from_dict(data)
    assert str(error.value) == f"invalid config: {message}"


# The defaults crawls ran with before issue 28: every key of the flat [rate_control] table and
# of [limits] (with time_budget_s), and where each is now.
OLD_RATE_CONTROL = {
    "mode": "adaptive",
    "target_ppm": None,
    "fixed_delay_s": None,
    "initial_delay_s": 1.0,
    "min_delay_s": 0.0,
    "max_delay_s": 60.0,
    "window_s": 60.0,
    "kp": -0.045,
    "ki": 0.0,
    "kd": -0.005,
    "smoothing": 1.0,
    "pid_reference_ppm": 40.0,
    "rtt_alpha": 0.125,
    "rtt_interval_s": 2.0,
    "rtt_min_s": 0.005,
    "rtt_max_s": 2.0,
    "rtt_increase": 1,
    "rtt_decrease": 1,
    "rtt_initial_cap": 4,
    "rtt_min_cap": 1,
    "rtt_max_cap": 8,
    "slow_start_doubling_s": 0.5,
    "ban_target_share": 0.92,
    "served_target_share": 0.97,
    "ban_backoff": 0.5,
    "approach_gain": 0.05,
    "probe_every": 200,
    "probe_step": 0.02,
    "rtt_target": 1.5,
    "rtt_confidence": 0.5,
    "rtt_noise_s": 0.005,
    "rtt_gain": 0.03,
    "unproven_delay_factor": 2.0,
    "base_samples": 16,
}
OLD_LIMITS = {
    "max_url_length": 2048,
    "max_pages_per_host": 100000,
    "trap_max_urls_per_pattern": 100,
    "trap_max_segment_repeats": 3,
    "max_depth_per_host": 30,
    "family_error_budget": 20,
    "time_budget_s": 3600.0,
}


def test_the_defaults_are_those_of_the_older_layouts():
    config = CrawlConfig()
    for key, default in OLD_RATE_CONTROL.items():
        table, name = "rate_control", key
        if ("rate_control", key) in MOVED_KEYS:
            table, name = MOVED_KEYS["rate_control", key]
        section = config
        for part in table.split("."):
            section = getattr(section, part)
        assert getattr(section, name) == default, key
    for key, default in OLD_LIMITS.items():
        name = MOVED_KEYS.get(("limits", key), ("limits", key))[1]
        assert getattr(config.limits, name) == default, key
    # The request's page and depth limits were None (none) by default.
    assert (config.limits.max_pages, config.limits.max_depth) == (None, None)


ROOT = Path(__file__).resolve().parents[1]
DOCUMENTED = sorted(ROOT.glob("docs/*.md")) + [ROOT / "README.md"]


@pytest.mark.parametrize(
    "example",
    [
        pytest.param(example, id=f"{page.name}-{number}")
        for page in DOCUMENTED
        for number, example in enumerate(
            re.findall(r"```toml\n(.*?)```", page.read_text(), re.S), 1
        )
    ],
)
def test_every_settings_file_the_docs_show_is_valid(example):
    config_from_dict(tomllib.loads(example))
