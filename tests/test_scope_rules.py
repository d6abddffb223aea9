"""Scope rules: the three modes, include/exclude, the --allow forms, and `[fetch] resolve`; as
plain rules, and in crawls of a loopback server that answers for several host names (every
name mapped to it with `[fetch] resolve`: nothing is asked of a DNS server)."""

from __future__ import annotations

import dataclasses
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from crawler.config import CrawlConfig, config_from_dict
from crawler.scope.addresses import AddressGuard, AddressRefused
from crawler.scope.rules import ScopeRules, ScopeSettings, parse_allow_entry, registered_domain
from crawler.scope.urls import BadUrl
from runtime.backends import start_fleet
from runtime.fleet import single_node
from storage.views import connect


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("a.b.example.co.uk", "example.co.uk"),
        ("www.example.com", "example.com"),
        ("alice.github.io", "alice.github.io"),  # a private suffix: one user's site
        ("127.0.0.1", "127.0.0.1"),
        ("localhost", "localhost"),
    ],
)
def test_registered_domains_come_from_the_bundled_suffix_list(host, domain):
    assert registered_domain(host) == domain


@pytest.mark.parametrize(
    ("mode", "followed", "refused"),
    [
        (
            "server",
            ["http://www.example.com/x"],
            ["http://docs.example.com/", "http://www.example.com:8080/"],
        ),
        (
            "domain",
            ["http://docs.example.com/", "http://example.com:8080/", "https://a.b.example.com/"],
            ["http://example.org/", "http://notexample.com/"],
        ),
        (
            "prefix",
            ["http://www.example.com/docs/", "http://www.example.com/docs/api/x?y=1"],
            [
                "http://www.example.com/doc",
                "http://www.example.com/",
                "https://www.example.com/docs/",
            ],
        ),
    ],
)
def test_each_mode_follows_what_it_says(mode, followed, refused):
    rules = ScopeRules.build(ScopeSettings(mode=mode), ["http://www.example.com/docs/index.html"])
    assert [rules.refusal(url) for url in followed] == [None] * len(followed)
    assert [rules.refusal(url) for url in refused] == ["out_of_scope"] * len(refused)


def test_exclude_wins_over_include_and_include_narrows_the_mode():
    settings = ScopeSettings(mode="domain", include=[r"\.html$"], exclude=["/private/"])
    rules = ScopeRules.build(settings, ["http://www.example.com/"])
    assert rules.refusal("http://docs.example.com/a.html") is None
    assert rules.refusal("http://docs.example.com/a.pdf") == "out_of_scope"
    assert rules.refusal("http://docs.example.com/private/a.html") == "excluded"
    assert rules.refusal("http://example.org/a.html") == "out_of_scope"


@pytest.mark.parametrize(
    ("entry", "followed", "refused"),
    [
        ("example.org", "http://example.org/x", "http://example.org:81/"),
        ("example.org:81", "http://example.org:81/x", "http://example.org/"),
        ("*.example.org", "https://a.b.example.org:8443/", "http://badexample.org/"),
        ("example.org/docs/", "https://example.org/docs/a", "http://example.org/blog/"),
        ("https://example.org/docs/", "https://example.org/docs/a", "http://example.org/docs/a"),
    ],
)
def test_allow_forms_add_what_they_name(entry, followed, refused):
    rules = ScopeRules.build(ScopeSettings(), ["http://seed.example/"], [parse_allow_entry(entry)])
    assert rules.refusal(followed) is None
    assert rules.refusal(refused) == "out_of_scope"


@pytest.mark.parametrize(
    "entry", ["*example.org", "ex*.org", "*.example.org/docs/", "", "http://", "user@x.org", "a b"]
)
def test_any_other_allow_form_is_refused_with_the_forms(entry):
    with pytest.raises(BadUrl, match=r"the forms are HOST, HOST:PORT, \*\.DOMAIN"):
        parse_allow_entry(entry)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"scope": {"mode": "subdomain"}}, "scope.mode"),
        ({"scope": {"exclude": ["(unclosed"]}}, "is not a regular expression"),
        ({"fetch": {"resolve": {"a.example": "not-an-ip"}}}, "is not an IP address"),
        ({"fetch": {"resolve": {"a.example:80": "127.0.0.1"}}}, "is not a host name"),
    ],
)
def test_bad_scope_and_resolve_settings_are_named(table, message):
    with pytest.raises(ValueError, match=message):
        config_from_dict(table)


def test_resolve_answers_without_dns_and_the_guard_still_checks_the_address():
    def no_dns(host, port):
        raise AssertionError(f"{host} was asked of DNS")

    resolve = {"site.example": "127.0.0.9"}
    guard = AddressGuard(allow_private=True, resolver=no_dns, resolve=resolve)
    assert guard.check_url("http://SITE.example:8080/") == "127.0.0.9"
    with pytest.raises(OSError):
        guard.check_url("http://gone.invalid/")  # RFC 6761: never resolves, never asked
    strict = AddressGuard(allow_private=False, resolver=no_dns, resolve=resolve)
    with pytest.raises(AddressRefused, match="loopback address 127.0.0.9"):
        strict.check_url("http://site.example/")


# ---- crawls of one loopback server answering for several names ---------------------------------

PAGES = {
    "www.example.com": {
        "/": [
            "/docs/",
            "/blog/x.html",
            "/private/p.html",
            "http://docs.example.com:{port}/",
            "http://other.example.org:{port}/",
        ],
        "/docs/": ["a.html", "b.html", "../blog/x.html"],
    },
    "docs.example.com": {"/": ["/d1.html"]},
    "other.example.org": {"/": ["/o1.html"]},
}
NAMES = {name: "127.0.0.1" for name in PAGES}


class Site(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        host = self.headers["Host"].split(":")[0]
        path = self.path
        if path == "/robots.txt":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        port = self.server.server_address[1]
        links = PAGES.get(host, {}).get(path, [])
        anchors = "".join(f'<a href="{link.format(port=port)}">x</a>' for link in links)
        body = f"<!DOCTYPE html><html><body>{host}{path}{anchors}</body></html>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Site)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def crawl(tmp_path: Path, seed: str, scope: dict, allow_private: bool = True) -> dict[str, str]:
    """Crawl with one in-process node under these `[scope]` settings; URL -> error class or
    'ok'."""
    config = CrawlConfig.model_validate(
        {
            "scope": scope,
            "fetch": {"resolve": NAMES},
            "rate_control": {"mode": "fixed", "target_ppm": 60000},
            "output": {"warc": False},
        }
    )
    rules = ScopeRules.build(config.scope, [seed])
    plan = single_node(
        "scope", str(tmp_path), config, sorted(rules.servers) or [seed.split("/")[2]], allow_private
    )
    fleet = start_fleet(dataclasses.replace(plan, scope=rules), "inprocess")
    coordinator = fleet.coordinator()
    coordinator.seed([seed])
    coordinator.run(poll_s=0.02, deadline_s=30)
    fleet.stop()
    rows = (
        connect(plan.crawl_dir)
        .execute(
            "SELECT url, coalesce(split_part(error, ':', 1), 'ok') FROM fetches "
            "WHERE url_path <> '/robots.txt'"
        )
        .fetchall()
    )
    return dict(rows)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("mode", "seed_path", "hosts", "paths"),
    [
        (
            "server",
            "/",
            {"www.example.com"},
            {"/", "/docs/", "/docs/a.html", "/docs/b.html", "/blog/x.html", "/private/p.html"},
        ),
        (
            "domain",
            "/",
            {"www.example.com", "docs.example.com"},
            {
                "/",
                "/docs/",
                "/docs/a.html",
                "/docs/b.html",
                "/blog/x.html",
                "/private/p.html",
                "/d1.html",
            },
        ),
        ("prefix", "/docs/", {"www.example.com"}, {"/docs/", "/docs/a.html", "/docs/b.html"}),
    ],
)
def test_each_mode_crawls_its_names(site, tmp_path, mode, seed_path, hosts, paths):
    fetched = crawl(tmp_path, f"http://www.example.com:{site}{seed_path}", {"mode": mode})
    assert set(fetched.values()) == {"ok"}
    assert {url.split("/")[2].split(":")[0] for url in fetched} == hosts
    assert {"/" + url.split("/", 3)[3] for url in fetched} == paths


@pytest.mark.integration
def test_exclude_and_include_on_a_crawl(site, tmp_path):
    fetched = crawl(
        tmp_path,
        f"http://www.example.com:{site}/",
        {"mode": "domain", "include": [r"/$", r"\.html$"], "exclude": ["/private/", "/blog/"]},
    )
    assert {"/" + url.split("/", 3)[3] for url in fetched} == {
        "/",
        "/docs/",
        "/docs/a.html",
        "/docs/b.html",
        "/d1.html",
    }


@pytest.mark.integration
def test_a_mapped_name_to_a_loopback_address_is_refused_without_allow_private(site, tmp_path):
    fetched = crawl(tmp_path, f"http://www.example.com:{site}/", {}, allow_private=False)
    assert fetched == {f"http://www.example.com:{site}/": "address_refused"}
