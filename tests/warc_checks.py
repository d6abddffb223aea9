"""Checks of a crawl's WARC files that several test modules share."""

from __future__ import annotations

import io
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator

from storage.views import connect


def records_of_rows(crawl_dir: Path) -> dict[str, tuple[str, str]]:
    """Asserts that every fetches row with a WARC location finds its record there, by offset
    and by warc_record_id; returns each record's URL and payload digest by WARC-Record-ID."""
    rows = (
        connect(crawl_dir)
        .execute(
            "SELECT url, warc_filename, warc_record_offset, warc_record_length, warc_record_id "
            "FROM fetches WHERE warc_filename IS NOT NULL"
        )
        .fetchall()
    )
    found = {}
    for url, filename, offset, length, record_id in rows:
        with open(crawl_dir / filename, "rb") as file:
            file.seek(offset)
            (record,) = ArchiveIterator(io.BytesIO(file.read(length)))
            headers = record.rec_headers
        assert headers.get_header("WARC-Target-URI") == url
        assert headers.get_header("WARC-Record-ID") == record_id
        found[record_id] = (url, headers.get_header("WARC-Payload-Digest"))
    assert len(found) == len(rows)  # one record per row, none shared
    return found
