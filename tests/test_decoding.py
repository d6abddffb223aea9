"""Pages decoded as a browser decodes them: a byte order mark, then the header's charset, then
a <meta> prescan, then detection; `content_charset` names what decoded them."""

from __future__ import annotations

import codecs

import pytest

from crawler.content.decoding import decode_html
from crawler.fetching.fetcher import FetchResult
from crawler.fetching.links import parse_html

GERMAN = "Größe und Übermaß: Straße"
JAPANESE = "日本語のページです。こんにちは、世界。"
CZECH = "Příliš žluťoučký kůň úpěl ďábelské ódy"


def page(text: str, meta: str = "") -> str:
    return f"<html><head>{meta}<title>{text}</title></head><body><p>{text}</p></body></html>"


# (Content-Type header, body, the text a browser shows, the charset it decodes with)
CASES = {
    "windows-1252, meta only": (
        "text/html",
        page(GERMAN, '<meta charset="windows-1252">').encode("cp1252"),
        GERMAN,
        "windows-1252",
    ),
    "Shift_JIS, header only": (
        "text/html; charset=Shift_JIS",
        page(JAPANESE).encode("shift_jis"),
        JAPANESE,
        "shift_jis",
    ),
    "ISO-8859-2, http-equiv meta": (
        "text/html",
        page(
            CZECH, '<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-2">'
        ).encode("iso-8859-2"),
        CZECH,
        "iso-8859-2",
    ),
    "UTF-8 with BOM, header says latin-1": (
        "text/html; charset=iso-8859-1",
        codecs.BOM_UTF8 + page(GERMAN).encode("utf-8"),
        GERMAN,
        "utf-8",
    ),
    "header only, latin-1 read as windows-1252": (
        "text/html; charset=ISO-8859-1",
        page(GERMAN + " – €").encode("cp1252"),
        GERMAN + " – €",
        "windows-1252",
    ),
    "header and meta disagree: the header wins": (
        "text/html; charset=windows-1252",
        page(GERMAN, '<meta charset="utf-8">').encode("cp1252"),
        GERMAN,
        "windows-1252",
    ),
    "a label no browser knows is ignored for the meta": (
        "text/html; charset=x-nope",
        page(GERMAN, '<meta charset="windows-1252">').encode("cp1252"),
        GERMAN,
        "windows-1252",
    ),
    "no declaration, UTF-8": ("text/html", page(GERMAN).encode("utf-8"), GERMAN, "utf-8"),
    "no declaration, Shift_JIS detected": (
        None,
        page(JAPANESE * 3).encode("shift_jis"),
        JAPANESE * 3,
        "shift_jis",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_every_page_of_the_charset_set_decodes_as_a_browser_would(case):
    content_type, body, text, charset = CASES[case]
    headers = {"content-type": content_type} if content_type else {}
    result = FetchResult("http://h.test/", 200, headers=headers, body=body)
    assert result.decoded.charset == charset
    assert text in result.text
    # The parser sees the same text: the title is read right.
    body, encoding = result.html_source()
    assert parse_html(body, result.url, encoding).title == text


def test_bad_bytes_are_replaced_not_fatal():
    decoded = decode_html(b"<p>caf\xe9 \xff\xfe ok</p>", "utf-8")
    assert decoded.charset == "utf-8" and "\ufffd" in decoded.text and "ok" in decoded.text
