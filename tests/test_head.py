"""Head facts and what they mean for the crawl (nofollow, noindex, meta refresh), Common
Crawl's URL columns, the main text's language, and near-duplicates by simhash."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from crawler.content.ccindex import surt_key, url_columns
from crawler.content.head import robots_directives
from crawler.content.text import main_text, simhash
from crawler.fetching.fetcher import FetchResult
from crawler.fetching.links import parse_html
from crawler.node.outcome import outcome_of
from errors import ErrorClass

URL = "http://docs.test/guide/page.html"
HEAD = """<html><head><title>T</title>
<link rel="canonical" href="/guide/">
<meta name="Description" content="  How to   crawl ">
<link rel="alternate" hreflang="de" href="/de/guide/">
<link rel="alternate" hreflang="fr" href="https://docs.test/fr/guide/">
{extra}</head><body>
<a href="a.html">a</a> <a href="b.html" rel="NoFollow UGC">b</a>
<a href="c.html" rel="nofollow">c</a> <a href="c.html">c again</a>
</body></html>"""


def parsed(extra: str = "", x_robots_tag: str | None = None):
    return parse_html(HEAD.format(extra=extra).encode(), URL, "utf-8", x_robots_tag)


def test_head_facts_are_read_and_made_absolute():
    head = parsed().head
    assert head.canonical == "http://docs.test/guide/"
    assert head.meta_description == "How to crawl"
    assert head.hreflang == (
        ("de", "http://docs.test/de/guide/"),
        ("fr", "https://docs.test/fr/guide/"),
    )
    assert head.meta_robots is None and head.meta_refresh is None


def test_a_link_marked_nofollow_is_not_followed_unless_another_link_to_it_is_plain():
    page = parsed()
    assert page.links == [f"http://docs.test/guide/{n}.html" for n in "abc"]
    assert page.followed_links(honour_nofollow=True) == [
        "http://docs.test/guide/a.html",
        "http://docs.test/guide/c.html",
    ]
    assert page.followed_links(honour_nofollow=False) == page.links


@pytest.mark.parametrize(
    ("meta", "header", "follows"),
    [
        ('<meta name="robots" content="noindex, NOFOLLOW">', None, False),
        ("", "nofollow", False),
        ("", "none", False),
        ("", "otherbot: nofollow", True),  # addressed to another crawler
        ('<meta name="robots" content="noindex">', None, True),
    ],
)
def test_a_page_that_says_nofollow_gives_no_links_to_follow(meta, header, follows):
    page = parsed(meta, header)
    assert bool(page.followed_links(honour_nofollow=True)) == follows
    assert len(page.followed_links(honour_nofollow=False)) == 3


def test_robots_directives():
    assert robots_directives("noindex", "NOFOLLOW") == {"noindex", "nofollow"}
    assert robots_directives(None, "none") == {"none", "noindex", "nofollow"}
    assert "noindex" not in robots_directives(None, "googlebot: noindex")
    assert "unavailable_after" in robots_directives(None, "unavailable_after: 2030-01-01")


def html_result(body: str, url: str = URL) -> FetchResult:
    return FetchResult(url, 200, headers={"content-type": "text/html"}, body=body.encode())


@pytest.mark.parametrize(
    "content", ["0; url=/next.html", "5;URL='/next.html'", "3, url=next.html", "0;/next.html"]
)
def test_a_meta_refresh_is_followed_like_a_redirect(content):
    body = f'<html><head><meta http-equiv="Refresh" content="{content}"></head></html>'
    outcome = outcome_of(
        html_result(body, "http://docs.test/old.html"), 1, None, hops=0, max_redirects=5
    )
    assert outcome.follow == "http://docs.test/next.html"
    assert outcome.page is not None and outcome.error is None  # the page row is kept


def test_a_meta_refresh_counts_against_the_redirect_limit_and_a_reload_is_no_redirect():
    body = '<html><head><meta http-equiv="refresh" content="0; url=/next.html"></head></html>'
    outcome = outcome_of(html_result(body), 1, None, hops=5, max_redirects=5)
    assert outcome.follow is None
    assert outcome.error is not None and outcome.error.kind is ErrorClass.TOO_MANY_REDIRECTS
    reload = f'<html><head><meta http-equiv="refresh" content="30; url={URL}"></head></html>'
    assert outcome_of(html_result(reload), 1, None, hops=0, max_redirects=5).follow is None
    timed = '<html><head><meta http-equiv="refresh" content="30"></head></html>'
    assert outcome_of(html_result(timed), 1, None, hops=0, max_redirects=5).follow is None


def test_common_crawl_url_columns():
    columns = url_columns("http://www.example.co.uk:8080/a/b?z=1&a=2")
    assert columns == {
        "url_host_name": "www.example.co.uk",
        "url_server": "www.example.co.uk:8080",
        "url_surtkey": "uk,co,example:8080)/a/b?a=2&z=1",
        "url_host_registered_domain": "example.co.uk",
        "url_host_tld": "uk",
        "url_protocol": "http",
        "url_port": 8080,
        "url_query": "z=1&a=2",
    }
    loopback = url_columns("https://127.0.0.1/x")
    assert (loopback["url_host_registered_domain"], loopback["url_port"]) == (None, None)
    assert surt_key("https://127.0.0.1/x") == "127.0.0.1)/x"
    # The ICANN suffixes: a private suffix (github.io) is a registered domain, as in tldextract.
    assert url_columns("https://a.b.github.io/")["url_host_registered_domain"] == "github.io"


MULTILINGUAL = {
    "en": "The crawler fetches every page of the site and writes what it finds to Parquet.",
    "de": "Der Crawler lädt jede Seite der Website und schreibt, was er findet, in Dateien.",
    "fr": "Le robot télécharge chaque page du site et écrit ce qu'il trouve dans des fichiers.",
    "es": "El rastreador descarga cada página del sitio y escribe lo que encuentra en archivos.",
    "ja": "クローラーはサイトのすべてのページを取得し、見つけたものをファイルに書き込みます。",
    "ru": "Это страница документации: здесь вы найдёте ответы на вопросы о том, как работает "
    "поисковый робот и что он делает с найденными страницами.",
}


@pytest.mark.parametrize("language", MULTILINGUAL)
def test_the_main_text_and_its_language(language):
    sentence = MULTILINGUAL[language]
    html = (
        "<html><body><nav>"
        + '<a href="/x">Home</a> ' * 20
        + "</nav><main><h1>Doc</h1>"
        + f"<p>{sentence}</p>" * 3
        + "</main><footer>© 2026</footer></body></html>"
    )
    text = main_text(html)
    assert sentence in text.text and "Home" not in text.text
    assert text.languages == language


GREEK = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi"
SENTENCES = [
    f"Sentence {word} tells how the crawler handles the {word} part of a site."
    for word in GREEK.split(" ")
]


def test_near_duplicates_by_simhash_with_the_documented_query():
    base = " ".join(SENTENCES)
    pages = {
        "http://a.test/1": base,
        "http://a.test/2": base.replace(SENTENCES[7], "An entirely new sentence instead."),
        "http://a.test/3": "A page about cooking pasta, " * 10 + "with tomatoes and basil.",
    }
    table = pa.table(
        {
            "url": list(pages),
            "crawl_id": ["c"] * 3,
            "text_simhash": [simhash(t) for t in pages.values()],
        }
    )
    con = duckdb.connect()
    con.register("pages", table)
    # docs/output.md, "Near-duplicate pages".
    pairs = con.execute(
        """
        SELECT a.url, b.url, bit_count(xor(a.text_simhash, b.text_simhash)) AS distance
        FROM pages a JOIN pages b
          ON a.crawl_id = b.crawl_id AND a.url < b.url
        WHERE bit_count(xor(a.text_simhash, b.text_simhash)) <= 12
        ORDER BY distance
        """
    ).fetchall()
    assert [(a, b) for a, b, _ in pairs] == [("http://a.test/1", "http://a.test/2")]


def test_simhash_values_stay_as_published():
    # Values of the first implementation: a faster one must give every stored simhash again,
    # or near-duplicate queries across crawls would compare unlike hashes.
    text = "The quick brown fox jumps over the lazy dog. " * 3
    text += "Crawlers fetch pages politely, one server at a time."
    long_text = " ".join(f"word{i % 97} w{i * 7 % 13}" for i in range(3000))
    assert simhash(text) == 7066288650436220628
    assert simhash(long_text) == -2711389756433179342
    assert simhash("one") == -8071251744885049950
    assert simhash("One two") == -7750924668951865227
    # Words lowered one by one give the text lowered whole: a final sigma, a dotted capital I,
    # white space other than ASCII's (main 9503511's value).
    unicode_text = "ΟΔΟΣ ΣΟΦΟΣ Σ ΑΣ. Σ ΑΣ' İstanbul STRASSE Straße\u00a0ǅemal \u2003 ΌΣΟΣ"
    assert simhash(unicode_text) == -926693110118575228
    assert simhash(" \n ") is None
