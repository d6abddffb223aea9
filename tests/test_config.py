"""The settings tree as docs/configuration.md documents it: the example file is valid (every key
of every section is in the generated reference: tests/test_docs.py)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from crawler.config import config_from_dict

CONFIGURATION = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()


def test_the_documented_example_file_is_a_valid_config():
    example = re.search(r"```toml\n(.*?)```", CONFIGURATION, re.S).group(1)
    config = config_from_dict(tomllib.loads(example))
    assert config.limits.max_pages_per_host == 5000 and config.scheduling.policy == "quality"
