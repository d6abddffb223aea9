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
    seeds = collect_seeds(_seed_lines(Path(path)))
    if not seeds.urls:
        raise _none_usable(Path(path), seeds.rejected)
    return seeds


def stream_seeds(path: str | Path) -> Iterator[str]:
    """The usable seeds of a file one by one, read only as far as they are taken (the command's
    check before it starts: a list of 100,000 is not read twice). A file that cannot be read
    is a SeedError at once; one with no usable URL, once that is known."""
    path = Path(path)
    lines = _seed_lines(path)  # reads and checks the file now

    def seeds() -> Iterator[str]:
        rejected: list[RejectedSeed] = []
        found = False
        for number, text in lines:
            try:
                url = seed_url(text)
            except BadUrl as exc:
                rejected.append(RejectedSeed(number, text[:500], str(exc)))
                continue
            found = True
            yield url
        if not found:
            raise _none_usable(path, rejected)

    return seeds()


def _seed_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The file's numbered lines; its content is read and checked before this returns."""
    if path.suffix.lower() == ".parquet":
        return _parquet_lines(path)
    text = _read_text(path)
    return _csv_lines(text, str(path)) if path.suffix.lower() == ".csv" else _text_lines(text)


def _none_usable(path: Path, rejected: list[RejectedSeed]) -> SeedError:
    if not rejected:
        return SeedError(f"seed file {path} holds no URLs")
    first = rejected[0]
    return SeedError(
        f"no usable seed in {path}: {len(rejected)} malformed (line {first.line}: {first.reason})"
    )


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
    except csv.Error as exc:
        raise SeedError(f"seed file {name} is not valid CSV: {exc}") from None
    if header is None:
        return iter(())
    columns = [column.strip().lower() for column in header]
    if "url" not in columns:
        raise SeedError(f"seed file {name} has no url column (its header: {header[:5]})")
    index = columns.index("url")

    def lines() -> Iterator[tuple[int, str]]:
        try:
            for row in reader:
                value = row[index].strip() if index < len(row) else ""
                if value:
                    yield reader.line_num, value
                elif any(cell.strip() for cell in row):
                    yield reader.line_num, ""  # a row without its URL: reported, not skipped
        except csv.Error as exc:
            raise SeedError(f"seed file {name} is not valid CSV: {exc}") from None

    return lines()


def _parquet_lines(path: Path) -> Iterator[tuple[int, str]]:
    import pyarrow as pa  # only here: a text seed list needs no Arrow
    import pyarrow.parquet as pq

    def unreadable(exc: Exception) -> SeedError:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return SeedError(f"cannot read seed file {path} as Parquet: {message}")

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise unreadable(exc) from None
    if "url" not in parquet.schema_arrow.names:
        raise SeedError(f"seed file {path} has no url column")
    kind = parquet.schema_arrow.field("url").type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise SeedError(f"the url column of seed file {path} does not hold text")

    def lines() -> Iterator[tuple[int, str]]:
        number = 0
        try:
            for batch in parquet.iter_batches(columns=["url"]):
                for value in batch.column(0).to_pylist():
                    number += 1
                    yield number, (value or "").strip()
        except (OSError, pa.ArrowException) as exc:
            raise unreadable(exc) from None

    return lines()
