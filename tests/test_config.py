"""The settings tree as README.md documents it: the example file is valid, and the table of
keys names every key of every section (rate_control and retry have their own section there)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from crawler.config import CrawlConfig, config_from_dict

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_readme_example_file_is_a_valid_config():
    example = re.search(r"```toml\n(.*?)```", README, re.S).group(1)
    config = config_from_dict(tomllib.loads(example))
    assert config.limits.time_budget_s == 1800 and config.scheduling.policy == "quality"


def test_the_readme_table_names_every_key_of_its_sections():
    table = README[README.index("| **`[fetch]`** |") :]
    table = table[: table.index("\n\n")]
    documented: dict[str, set[str]] = {}
    section = ""
    for line in table.splitlines():
        if heading := re.match(r"\| \*\*`\[(\w+)\]`\*\*", line):
            section = heading.group(1)
            documented[section] = set()
        elif key := re.match(r"\| `(\w+)` \|", line):
            documented[section].add(key.group(1))
    sections = {
        name: set(field.annotation.model_fields)
        for name, field in CrawlConfig.model_fields.items()
        if name not in ("rate_control", "retry")
    }
    assert documented == sections
