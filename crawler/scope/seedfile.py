"""Seed lists at scale: a file of start URLs (`--seeds FILE`, the request's `seeds_file`).

Three formats, told by the file's name: `.csv` (a header row with a `url` column; other columns
are ignored), `.parquet` (a `url` column), anything else plain text (one URL a line; blank lines
and `#` comments are skipped). Every URL is canonicalized (crawler/scope/urls.py), so two
spellings of one URL are one seed. A line that is not a URL the crawler can fetch is kept aside
with its reason, never an abort: a list of 100,000 seeds is not thrown away for one typo. Only a
file that cannot be read at all, or holds no usable URL, is an error (`SeedError`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from crawler.scope.urls import BadUrl, canonical_url


class SeedError(ValueError):
    """Seeds or scope that cannot start a crawl; the message is one line."""


@dataclass(frozen=True)
class RejectedSeed:
    """A line of a seed file that is not a usable URL."""

    line: int  # 1-based: the file's line (text, CSV) or row (Parquet)
    text: str  # as written, cut to 500 characters
    reason: str


@dataclass
class SeedList:
    """The usable seeds of a list, canonical and unique in their first order, and the rest."""

    urls: list[str] = field(default_factory=list)
    rejected: list[RejectedSeed] = field(default_factory=list)
    duplicates: int = 0  # lines whose canonical URL came earlier

    def examples(self, count: int = 3) -> list[str]:
        """The first rejected lines, as `line N: reason`."""
        return [f"line {seed.line}: {seed.reason}" for seed in self.rejected[:count]]


def collect_seeds(lines: Iterable[tuple[int, str]]) -> SeedList:
    """Canonical, unique seeds of numbered `lines` (blank ones already skipped)."""
    seeds = SeedList()
    seen: set[str] = set()
    for number, text in lines:
        try:
            url = seed_url(text)
        except BadUrl as exc:
            seeds.rejected.append(RejectedSeed(number, text[:500], str(exc)))
            continue
        if url in seen:
            seeds.duplicates += 1
        else:
            seen.add(url)
            seeds.urls.append(url)
    return seeds


def seed_url(text: str) -> str:
    """The canonical URL of one seed; BadUrl (the reason, for a person) if it is none."""
    try:
        credentials = "@" in urlsplit(text.strip()).netloc
    except ValueError:
        credentials = False  # canonical_url says what is wrong with it
    if credentials:
        # The crawler never logs in; a password would only end up in the output and logs.
        raise BadUrl("carries credentials (user:password@): the crawler does not log in")
    return canonical_url(text)


def read_seed_file(path: str | Path) -> SeedList:
    """The seeds of a text, CSV or Parquet file (see the module docstring); SeedError when the
    file cannot be read or holds no usable URL."""
    path = Path(path)
    name = str(path)
    if path.suffix.lower() == ".parquet":
        seeds = collect_seeds(_parquet_lines(path))
    else:
        text = _read_text(path)
        lines = _csv_lines(text, name) if path.suffix.lower() == ".csv" else _text_lines(text)
        seeds = collect_seeds(lines)
    if not seeds.urls:
        if not seeds.rejected:
            raise SeedError(f"seed file {name} holds no URLs")
        raise SeedError(
            f"no usable seed in {name}: {len(seeds.rejected)} malformed"
            f" ({'; '.join(seeds.examples(1))})"
        )
    return seeds


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SeedError(f"cannot read seed file {path}: {exc.strerror or exc}") from None
    if b"\x00" in data:
        raise SeedError(f"seed file {path} is binary, not a list of URLs")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SeedError(f"seed file {path} is not UTF-8 text (byte {exc.start})") from None


def _text_lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            yield number, line


def _csv_lines(text: str, name: str) -> Iterator[tuple[int, str]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            return
        columns = [column.strip().lower() for column in header]
        if "url" not in columns:
            raise SeedError(f"seed file {name} has no url column (its header: {header[:5]})")
        index = columns.index("url")
        for row in reader:
            value = row[index].strip() if index < len(row) else ""
            if value:
                yield reader.line_num, value
            elif any(cell.strip() for cell in row):
                yield reader.line_num, ""  # a row without its URL: reported, not skipped
    except csv.Error as exc:
        raise SeedError(f"seed file {name} is not valid CSV: {exc}") from None


def _parquet_lines(path: Path) -> Iterator[tuple[int, str]]:
    import pyarrow as pa  # only here: a text seed list needs no Arrow
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
        if "url" not in parquet.schema_arrow.names:
            raise SeedError(f"seed file {path} has no url column")
        if not pa.types.is_string(parquet.schema_arrow.field("url").type) and not (
            pa.types.is_large_string(parquet.schema_arrow.field("url").type)
        ):
            raise SeedError(f"the url column of seed file {path} does not hold text")
        number = 0
        for batch in parquet.iter_batches(columns=["url"]):
            for value in batch.column(0).to_pylist():
                number += 1
                yield number, (value or "").strip()
    except (OSError, pa.ArrowException) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SeedError(f"cannot read seed file {path} as Parquet: {message}") from None
