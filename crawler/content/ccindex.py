"""The URL columns of Common Crawl's index (cc-index-table) for one URL: its SURT key, host
parts, protocol, port and query. The registered domain comes from tldextract's bundled
snapshot of the Public Suffix List: no network, ever."""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import tldextract

from crawler.scope.urls import DEFAULT_PORTS

# The bundled snapshot only: an empty list of URLs to fetch, and no cache directory.
_EXTRACT = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def load_suffix_list() -> None:
    """Parse the bundled public suffix list now. The first look-up parses it otherwise, about
    80 ms holding the GIL, which a node would spend in its first page's row while its other
    connections' first requests are in flight: their RTTs, read as the servers' at the ceiling,
    would be stretched by it."""
    _EXTRACT("example.com")


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


@lru_cache(maxsize=1 << 12)
def _host_columns(host: str) -> tuple[str | None, str | None]:
    """(registered domain, top-level domain) of a host; none for an address."""
    if _is_address(host):
        return None, None
    parts = _EXTRACT(host)
    registered = f"{parts.domain}.{parts.suffix}" if parts.domain and parts.suffix else None
    return registered, host.rsplit(".", 1)[-1] or None


def surt_key(url: str) -> str:
    """The SURT form Common Crawl sorts its index by: the host's labels reversed and joined by
    commas (less a leading `www`), a non-default port, `)`, then the path and the query with
    its parameters sorted, all in lower case: `http://www.Example.com/A?b=1&a=2` ->
    `com,example)/a?a=2&b=1`."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if _is_address(host):
        key = host  # an address is not reversed
    else:
        labels = host.split(".")
        if labels[0] == "www" and len(labels) > 2:
            labels = labels[1:]
        key = ",".join(reversed(labels))
    if parts.port is not None and parts.port != DEFAULT_PORTS.get(parts.scheme):
        key += f":{parts.port}"
    path = parts.path or "/"
    query = urlencode(sorted(parse_qsl(parts.query, keep_blank_values=True)))
    return f"{key}){path}{'?' + query if query else ''}".lower()


def url_columns(url: str) -> dict[str, Any]:
    """The cc-index URL columns of `url` (a canonical URL), and `url_server` (`host[:port]`)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    registered, tld = _host_columns(host)
    return {
        "url_host_name": host,
        "url_server": parts.netloc,
        "url_surtkey": surt_key(url) if host else None,
        "url_host_registered_domain": registered,
        "url_host_tld": tld,
        "url_protocol": parts.scheme or None,
        "url_port": port if port != DEFAULT_PORTS.get(parts.scheme) else None,
        "url_query": parts.query or None,
    }
