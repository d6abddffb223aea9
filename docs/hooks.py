"""MkDocs hook: fills the reference markers of the pages with tables rendered from the code
(crawlflow/reference.py), so that the configuration and output references cannot drift."""

from __future__ import annotations

from typing import Any

from crawlflow.reference import MARKERS


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, render in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown
