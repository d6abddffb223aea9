"""Main-text extraction: resiliparse against trafilatura on real documentation pages.

The pages are this project's own documentation as MkDocs Material builds it (`mkdocs build`,
docs/): real documentation pages with a header, a navigation tree, a table of contents and a
footer around the article. Their true main text is known from their structure: the text of
`<article>`. For each extractor: CPU time per page (process time, the median of `--repeat`
passes), and the quality of its text against the article's, as word-level precision (how much
of what it kept is article), recall (how much of the article it kept) and F1, over the
multiset of words; and the share of pages whose text is empty.

    .venv/bin/python -m bench.text_extraction [--repeat N] [--site DIR] [--json PATH]

`--site`: an already built site (default: build the docs into a temporary directory).
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lxml.html
import trafilatura
from resiliparse.extract.html2text import extract_plain_text

from bench import harness
from crawler.content.text import main_text

_WORDS = re.compile(r"\w+")


def _resiliparse(html: str) -> str:
    return extract_plain_text(html, main_content=True, alt_texts=False)


def _trafilatura(html: str) -> str:
    return trafilatura.extract(html, include_comments=False, include_tables=True) or ""


def _trafilatura_fast(html: str) -> str:
    return trafilatura.extract(html, fast=True, include_comments=False, include_tables=True) or ""


def _crawlflow(html: str) -> str:
    """What the crawler stores: resiliparse, plus language and simhash."""
    return main_text(html).text


EXTRACTORS: dict[str, Callable[[str], str]] = {
    "resiliparse": _resiliparse,
    "crawlflow main_text (resiliparse + language + simhash)": _crawlflow,
    "trafilatura": _trafilatura,
    "trafilatura fast=True": _trafilatura_fast,
}


def gold_text(html: str) -> str:
    """The article's text: what a reader came for."""
    root = lxml.html.document_fromstring(html)
    articles = root.xpath("//article")
    if not articles:
        return ""
    for noise in articles[0].xpath(".//script | .//style | .//a[@class='headerlink']"):
        noise.drop_tree()
    return " ".join(articles[0].itertext())


def scores(text: str, gold: str) -> tuple[float, float]:
    """Word-multiset precision and recall of `text` against `gold`."""
    got, want = Counter(_WORDS.findall(text.lower())), Counter(_WORDS.findall(gold.lower()))
    common = sum((got & want).values())
    precision = common / sum(got.values()) if got else 0.0
    recall = common / sum(want.values()) if want else 0.0
    return precision, recall


def build_site(directory: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(directory)], check=True
    )
    return directory


def main() -> None:
    parser = harness.arguments(__doc__)
    parser.add_argument("--repeat", type=int, default=5, help="timed passes over the pages")
    parser.add_argument("--site", type=Path, default=None, help="an already built site")
    args = parser.parse_args()
    run = harness.start("text_extraction", args)
    with tempfile.TemporaryDirectory(prefix="bench-text-") as tmp:
        site = args.site or build_site(Path(tmp) / "site")
        pages = {
            str(path.relative_to(site)): path.read_text(encoding="utf-8")
            for path in sorted(site.rglob("*.html"))
            if path.name != "404.html"
        }
    golds = {name: gold_text(html) for name, html in pages.items()}
    results: dict[str, Any] = {}
    for name, extract in EXTRACTORS.items():
        texts = {page: extract(html) for page, html in pages.items()}  # warm-up, and the texts
        passes = []
        for _ in range(args.repeat):
            started = time.process_time()
            for html in pages.values():
                extract(html)
            passes.append((time.process_time() - started) / len(pages))
        precision, recall = zip(*(scores(texts[p], golds[p]) for p in pages), strict=True)
        p, r = statistics.mean(precision), statistics.mean(recall)
        results[name] = {
            "cpu_ms_per_page": round(statistics.median(passes) * 1000, 2),
            "precision": round(p, 3),
            "recall": round(r, 3),
            "f1": round(2 * p * r / (p + r), 3) if p + r else 0.0,
            "empty_share": sum(1 for t in texts.values() if not t.strip()) / len(pages),
        }
        row = results[name]
        print(
            f"{name:58s} {row['cpu_ms_per_page']:8.2f} ms/page  P {row['precision']:.3f}  "
            f"R {row['recall']:.3f}  F1 {row['f1']:.3f}  empty {row['empty_share']:.0%}",
            flush=True,
        )
    run.write_json(
        {
            "pages": len(pages),
            "mean_page_kb": round(sum(len(h) for h in pages.values()) / len(pages) / 1000, 1),
            "extractors": results,
        }
    )


if __name__ == "__main__":
    main()
