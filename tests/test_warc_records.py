"""What a WARC record carries for Common Crawl's readers: WARC-IP-Address, the WARC-Record-ID
that `fetches.warc_record_id` repeats, and the wire headers kept as X-Crawler-*."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from fastwarc.warc import ArchiveIterator as FastArchiveIterator
from warcio.archiveiterator import ArchiveIterator

from storage.warc import Exchange, WarcBatchWriter, read_record


def test_an_answer_record_names_its_address_id_and_wire_headers(tmp_path):
    writer = WarcBatchWriter(tmp_path)
    body = b"<html><title>t</title></html>"
    exchange = Exchange(
        "http://a.test:8080/p",
        datetime(2026, 1, 1, tzinfo=UTC),
        200,
        {"User-Agent": "crawlflow"},
        {"content-type": "text/html", "content-encoding": "gzip", "content-length": "41"},
        body,
        ip_address="127.0.0.5",
    )
    archived = writer.archive(exchange)
    chunks, (location,) = writer.contents("node-0-000001.parquet", [archived])
    path = tmp_path / location["warc_filename"]
    path.write_bytes(b"".join(chunks))
    record = read_record(path, location["warc_record_offset"], location["warc_record_length"])
    assert f"WARC-Record-ID: {location['warc_record_id']}\r\n".encode() in record
    assert b"WARC-IP-Address: 127.0.0.5\r\n" in record
    assert b"X-Crawler-Content-Encoding: gzip\r\n" in record
    assert b"X-Crawler-Content-Length: 41\r\n" in record
    assert f"Content-Length: {len(body)}\r\n".encode() in record
    # Both readers read the file, and the payload is the decoded body.
    with open(path, "rb") as file:
        payloads = [r.content_stream().read() for r in ArchiveIterator(file)]
    assert payloads[-1] == body
    fast = list(FastArchiveIterator(io.BytesIO(path.read_bytes()), verify_digests=True))
    assert len(fast) == len(payloads) == 3
