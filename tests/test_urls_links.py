from __future__ import annotations

from urllib.parse import urljoin, urlsplit, urlunsplit

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from w3lib.url import canonicalize_url

from crawler.fetching.links import LinkResolver, parse_html
from crawler.scope.addresses import AddressGuard, AddressRefused, refusal_reason
from crawler.scope.rules import ScopeRules, ScopeSettings, parse_allow_entry
from crawler.scope.urls import BadUrl, canonical_url, host_key


def test_canonical_url_normalizes_spellings_of_one_resource():
    assert (
        canonical_url("HTTP://Example.COM:80/a/../b?z=1&a=2#frag") == "http://example.com/b?a=2&z=1"
    )
    assert canonical_url("https://x.org:443") == "https://x.org/"
    assert canonical_url("http://127.0.1.2:8080/p/1#top") == "http://127.0.1.2:8080/p/1"


@pytest.mark.parametrize("url", ["ftp://x.org/", "mailto:a@b.c", "http://", "http://x:99999/"])
def test_canonical_url_rejects_what_cannot_be_fetched(url):
    with pytest.raises(BadUrl):
        canonical_url(url)


def test_scope_is_by_server_including_port():
    scope = ScopeRules.build(
        ScopeSettings(), ["http://127.0.1.1:8000/"], [parse_allow_entry("127.0.1.2:8000")]
    )
    assert scope.refusal("http://127.0.1.1:8000/p") is None
    assert scope.refusal("http://127.0.1.2:8000/") is None
    assert scope.refusal("http://127.0.1.1:8001/p") == "out_of_scope"
    assert host_key("http://127.0.1.1:8000/x?y") == "127.0.1.1:8000"


def test_parse_html_resolves_base_relative_and_drops_fragments():
    body = b"""<html><head><title> Docs
      page </title><base href="/docs/v2/"></head><body>
      <a href="intro.html#part">intro</a>
      <a href="../v1/old.html">old</a>
      <a href="/root?b=2&a=1">root</a>
      <a href="http://other.example:81/x">cross</a>
      <a href="mailto:someone@example.com">mail</a>
      <a href="javascript:void(0)">js</a>
      <a href="intro.html">dup</a>
      <a>no href</a>
    </body></html>"""
    page = parse_html(body, "http://site.example/index.html")
    assert page.title == "Docs page"
    assert page.links == [
        "http://site.example/docs/v2/intro.html",
        "http://site.example/docs/v1/old.html",
        "http://site.example/root?a=1&b=2",
        "http://other.example:81/x",
    ]


def test_parse_html_survives_garbage():
    assert parse_html(b"", "http://a.example/").links == []
    page = parse_html(b"\x00\xff<a href='/x'>x</a><<<>>", "http://a.example/")
    assert page.links == ["http://a.example/x"]


# Pieces of hrefs that hit every rule of urljoin and canonicalization: dot segments, empty
# segments, schemes, servers with and without ports, case, escapes, queries, fragments.
HREF_PIECES = st.sampled_from(
    [
        "a",
        "B",
        "p",
        "0",
        ".",
        "..",
        "/",
        "//",
        "-",
        "_",
        "~",
        "%41",
        "%2f",
        " ",
        "\t",
        "é",
        ":",
        "http:",
        "https:",
        "HTTP://",
        "//h.test",
        "//H.test",
        "//-x.test",
        "//127.0.0.9",
        ":80",
        ":443",
        ":8080",
        ":0080",
        ":99999",
        "?",
        "?b=2&a=1",
        "#",
        "#x",
        ";p",
        "@",
        "+",
        "(",
        "'",
    ]
)
BASES = st.sampled_from(
    [
        "http://site.test/",
        "http://site.test/a/b/c.html",
        "https://site.test:8443/a/",
        "http://127.0.0.1:8080/x/y?q=1",
        "http://site.test/a//b/",
        "http://Site.test/A%7e/",
    ]
)


@settings(max_examples=3000, deadline=None)
@given(BASES, st.lists(HREF_PIECES, max_size=8).map("".join))
@example("http://site.test/a/b/c.html", "../../../../p/1")
@example("http://site.test/a/b/c.html", "x/./y/../..")
def test_link_resolver_agrees_with_urljoin_and_canonical_url(base, href):
    def outcome(resolve):
        try:
            return resolve()
        except BadUrl:
            return BadUrl

    expected = outcome(lambda: canonical_url(urljoin(base, href)))
    assert outcome(lambda: LinkResolver(base)(href)) == expected


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("172.16.5.4", "private"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.1", "multicast"),
        ("::1", "loopback"),
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "cloud metadata"),
        ("::ffff:10.0.0.1", "private"),
        ("0.0.0.0", "unspecified"),
        ("93.184.216.34", None),
        # Shared address space (carrier-grade NAT) and other ranges that are not public.
        ("100.64.0.1", "not public"),
        ("100.127.255.254", "not public"),
        ("198.18.0.1", "private"),
        ("100.100.100.200", "cloud metadata"),
        # IPv6 addresses that reach an IPv4 address: judged by the address they reach.
        ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::", "link-local"),  # 6to4 of 169.254.169.254
        ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 of 169.254.169.254
        ("64:ff9b::7f00:1", "loopback"),
        ("::7f00:1", "loopback"),  # IPv4-compatible 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),  # Teredo, client 127.0.0.1
        ("2002:5db8:d822::1", None),  # 6to4 of a public address
        ("2606:2800:220:1:248:1893:25c8:1946", None),
    ],
)
def test_refusal_reason(address, reason):
    assert refusal_reason(address) == reason


def test_guard_checks_every_resolved_address_without_connecting():
    # Name resolution is stubbed: nothing is resolved or contacted for real.
    answers = {"mixed.example": ["93.184.216.34", "10.0.0.7"], "public.example": ["93.184.216.34"]}
    answers["93.184.216.34"] = ["93.184.216.34"]
    guard = AddressGuard(allow_private=False, resolver=lambda host, port: answers[host])
    # The checked address is the one to connect to; an IP literal needs no pinning.
    assert guard.check_url("http://public.example/") == "93.184.216.34"
    assert guard.check_url("http://93.184.216.34/") is None
    with pytest.raises(AddressRefused, match="private address 10.0.0.7"):
        guard.check_url("http://mixed.example/")
    allowed = AddressGuard(allow_private=True, resolver=lambda h, p: answers[h])
    # Allowed, a name is still resolved here, and the connection pinned to what it gave.
    assert allowed.check_url("http://mixed.example/") == "93.184.216.34"


@settings(max_examples=300, deadline=None)
@given(
    host=st.sampled_from(["Example.COM", "127.0.0.1", "[::1]", "b\u00fccher.example", "x-y.z"]),
    port=st.sampled_from(["", ":80", ":8080"]),
    path=st.text(st.sampled_from(list("aZ09-._~/%?#=&+ é")), max_size=24),
)
def test_canonical_url_is_what_w3lib_gives_the_checked_url(host, port, path):
    # canonical_url skips w3lib for plain paths: the answer must be w3lib's all the same.
    url = f"http://{host}{port}/{path}"
    try:
        canonical = canonical_url(url)
    except BadUrl:
        return
    assert canonical == canonicalize_url(canonical)
    scheme, netloc, plain_path, query, _ = urlsplit(url)
    netloc = netloc.lower().removesuffix(":80")
    assert canonical == canonicalize_url(urlunsplit((scheme, netloc, plain_path or "/", query, "")))
