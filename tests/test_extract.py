"""[extract]: fields by CSS selector and XPath, and a user function whose failures (an
exception, a loop, junk) cost only its own page's field."""

from __future__ import annotations

import sys
import textwrap
import threading

import lxml.html
import pytest

from crawler.config import ConfigError, config_from_dict
from crawler.content.extract import FUNCTION_FIELD, Extractor, Field, Page
from crawler.content.settings import ExtractSettings

HTML = """<html><head><script type="application/ld+json">{"@type": "Product"}</script></head>
<body><h1> Blue   mug </h1><span class="price" data-currency="EUR">12.50</span>
<span class="price">9.99</span></body></html>"""

USER_CODE = textwrap.dedent(
    """
    import time

    def good(page):
        return {"h1_len": len(page.tree.findtext(".//h1").strip()), "url": page.url,
                "tags": ["a", "b"]}

    def raises(page):
        raise ValueError("no price on " + page.url)

    def loops(page):
        while True:
            try:
                pass
            except Exception:  # a timeout is not an Exception: this cannot swallow it
                pass

    def junk(page):
        return ["not", "a", "mapping"]

    def junk_keys(page):
        return {1: "x", "ok": object.__new__(Unprintable)}

    class Unprintable:
        def __repr__(self):
            raise RuntimeError("no repr")
        __str__ = __repr__
    """
)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_fields.py").write_text(USER_CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "user_fields"
    sys.modules.pop("user_fields", None)


def page(url: str = "http://shop.test/mug") -> Page:
    return Page(url, 200, {"content-type": "text/html"}, HTML, lxml.html.document_fromstring(HTML))


def test_css_and_xpath_fields():
    extractor = Extractor(
        ExtractSettings(
            css={"title": "h1", "price": "span.price", "missing": "div.nothing"},
            xpath={
                "currency": "//span[@class='price']/@data-currency",
                "ld_json": "//script[@type='application/ld+json']/text()",
                "count": "count(//span)",
            },
        )
    )
    assert extractor.fields(page()) == [
        Field("title", "Blue mug"),
        Field("price", "12.50\n9.99"),
        Field("missing", None),
        Field("currency", "EUR"),
        Field("ld_json", '{"@type": "Product"}'),
        Field("count", "2.0"),
    ]


def test_a_selector_that_does_not_parse_is_a_config_error():
    with pytest.raises(ConfigError, match="css price"):
        config_from_dict({"extract": {"css": {"price": "span[["}}})
    with pytest.raises(ConfigError, match="cannot load no_such_module_here:f"):
        config_from_dict({"extract": {"function": "no_such_module_here:f"}})


def test_a_user_function_returns_fields(user_module):
    extractor = Extractor(ExtractSettings(function=f"{user_module}:good"))
    assert extractor.fields(page()) == [
        Field("h1_len", "10"),
        Field("url", "http://shop.test/mug"),
        Field("tags", '["a", "b"]'),
    ]


@pytest.mark.parametrize(
    ("function", "error"),
    [
        ("raises", "ValueError: no price on http://shop.test/mug"),
        ("loops", "timeout: more than 0.2 s"),
        ("junk", "returned list, not a mapping"),
    ],
)
def test_a_failing_function_costs_only_its_pages_field(user_module, function, error):
    extractor = Extractor(
        ExtractSettings(
            css={"title": "h1"}, function=f"{user_module}:{function}", function_timeout_s=0.2
        )
    )
    fields = extractor.fields(page())
    assert fields == [Field("title", "Blue mug"), Field(FUNCTION_FIELD, None, error)]
    # The next page is served as usual: nothing of the failure is left behind.
    assert extractor.fields(page("http://shop.test/next"))[0] == Field("title", "Blue mug")


def test_junk_keys_and_values_are_errors_of_their_own_fields(user_module):
    extractor = Extractor(ExtractSettings(function=f"{user_module}:junk_keys"))
    fields = extractor.fields(page())
    assert fields[0] == Field(FUNCTION_FIELD, None, "a field name 1 is not a string")
    assert (fields[1].name, fields[1].value) == ("ok", None)
    assert fields[1].error is not None and "no repr" in fields[1].error


def test_a_looping_function_in_several_threads_stops_in_each(user_module):
    extractor = Extractor(ExtractSettings(function=f"{user_module}:loops", function_timeout_s=0.2))
    results: list[list[Field]] = []
    threads = [
        threading.Thread(target=lambda: results.append(extractor.fields(page()))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert [fields[0].error for fields in results] == ["timeout: more than 0.2 s"] * 3


def test_long_values_are_cut():
    extractor = Extractor(ExtractSettings(xpath={"all": "string(/)"}, max_value_chars=10))
    (field,) = extractor.fields(page())
    assert field.value is not None and len(field.value) == 10
    assert field.error == "value cut at 10 characters"
