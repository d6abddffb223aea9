"""The user documentation against the code: every settings key and every output column is
documented, the paths README.md and the architecture page name exist, README.md stays short,
no page cites a document outside the repository, and the site builds strictly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from crawler.config import CrawlConfig
from crawler.section import Section
from crawlflow.reference import (
    CONFIG_MARKER,
    SCHEMA_MARKER,
    render_config_reference,
    render_schema_reference,
)
from storage.schema import DATASETS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
PAGES = sorted(DOCS.glob("*.md"))


def every_key(model: type[Section], table: str = "") -> list[tuple[str, str]]:
    """(table, key) of every key of the settings tree under `model`, sub-tables included."""
    keys: list[tuple[str, str]] = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, Section):
            keys += every_key(annotation, f"{table}.{name}" if table else name)
        else:
            keys.append((table, name))
    return keys


def section_of(text: str, heading: str) -> str:
    """The text under `heading` (a line of its own) up to the next heading of any level."""
    start = text.index(f"{heading}\n") + len(heading)
    end = re.search(r"^#{1,6} ", text[start:], re.M)
    return text[start:] if end is None else text[start : start + end.start()]


def test_the_config_reference_has_every_key_of_every_table():
    rendered = render_config_reference()
    keys = every_key(CrawlConfig)
    assert len(keys) > 50
    for table, key in keys:
        section = section_of(rendered, f"### `[{table}]`")
        # key, type, default: every key is documented with a type and a default.
        assert re.search(rf"^\| `{key}` \| [^|]+ \| `[^`]+` \|", section, re.M), (table, key)
    assert CONFIG_MARKER in (DOCS / "configuration.md").read_text()


def test_every_column_of_every_dataset_has_a_meaning_in_the_output_reference():
    page = (DOCS / "output.md").read_text()
    for dataset, schema in DATASETS.items():
        rows = re.findall(r"^\| `(\w+)` \| (.*?) \|$", section_of(page, f"### `{dataset}`"), re.M)
        meanings = {column: meaning.strip() for column, meaning in rows}
        assert set(meanings) == set(schema.names), dataset
        assert all(meanings.values()), dataset
    types = render_schema_reference()
    for dataset, schema in DATASETS.items():
        for column in schema:
            assert f"| `{column.name}` | `{column.type}` |" in section_of(
                types, f"### `{dataset}` column types"
            )
    assert SCHEMA_MARKER in page


def test_readme_is_at_most_300_lines():
    assert len(README.read_text().splitlines()) <= 300


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda path: path.name)
def test_no_page_cites_a_document_outside_the_repository(path):
    assert not re.search(r"\bSPEC\b", path.read_text())


@pytest.mark.parametrize("path", [README, DOCS / "architecture.md"], ids=lambda path: path.name)
def test_every_repository_path_in_backticks_exists(path):
    """Every `a/b.py`-like name in backticks; names with placeholders (`OUT/<crawl_id>/`),
    URLs, URL paths (`/about`) and globs are not paths of the repository."""
    named = {
        token.rstrip("/")
        for token in re.findall(r"`([^`\s]+)`", path.read_text())
        if "/" in token and not token.startswith("/") and re.fullmatch(r"[\w.\-/]+", token)
    }
    assert named
    missing = sorted(name for name in named if not (ROOT / name).exists())
    assert not missing


@pytest.mark.integration  # a few seconds: MkDocs and the Material theme
def test_the_site_builds_strictly_with_the_generated_references(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    configuration = (site / "configuration" / "index.html").read_text()
    assert "reference:config" not in configuration and "max_pages_per_host" in configuration
    assert "warc_record_length" in (site / "output" / "index.html").read_text()
