"""URL canonicalization and crawl scope.

Every URL the crawler stores, de-duplicates or routes goes through `canonical_url` first, so
two spellings of one resource (fragment, query order, default port, case of the host) are one
URL everywhere: in the frontier, in the seen set and in the Parquet output.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from urllib.parse import urlsplit, urlunsplit

from w3lib.url import canonicalize_url

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_URL_LENGTH = 2048
# An ASCII character other than a letter, a digit, "-", "." or "_" (non-ASCII names are IDNA's).
NOT_IN_A_DNS_NAME = re.compile(r"[\x00-\x2c/:-@\[-\^`{-\x7f]")
# A path w3lib's canonicalization leaves as it is, when it has no "." segment (which w3lib
# resolves): unreserved characters and "/" only. Most URLs of a crawl are such.
PLAIN_PATH = re.compile(r"/[A-Za-z0-9\-._~/]*")


class BadUrl(ValueError):
    """A URL the crawler cannot or will not fetch (wrong scheme, no host, too long)."""


def canonical_url(url: str) -> str:
    """Return the canonical form: lower-case scheme and host, no default port, sorted query,
    no fragment, normalized path and percent-encoding."""
    if len(url) > MAX_URL_LENGTH:
        raise BadUrl(f"URL longer than {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise BadUrl(f"malformed URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise BadUrl(f"unsupported scheme in {url!r} (only http and https)")
    if not parts.hostname:
        raise BadUrl(f"no host in {url!r}")
    try:
        netloc = checked_host(parts.hostname.lower())
    except BadUrl as exc:
        raise BadUrl(f"malformed host in {url[:200]!r}: {exc}") from None
    if port is not None and port != DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    path = parts.path or "/"
    if not parts.query and PLAIN_PATH.fullmatch(path) and "/." not in path and netloc.isascii():
        return f"{scheme}://{netloc}{path}"  # what canonicalize_url would give, 10x sooner
    try:
        return canonicalize_url(urlunsplit((scheme, netloc, path, parts.query, "")))
    except (UnicodeError, ValueError) as exc:  # IDNA: a label empty or over 63 characters, ...
        raise BadUrl(f"malformed host in {url[:200]!r}: {exc}") from None


@functools.lru_cache(maxsize=65536)
def checked_host(host: str) -> str:
    """The lower-case `host` as a URL writes it (an IPv6 literal in brackets), or BadUrl if
    no request could reach it. Cached: a crawl meets the same few servers in every link."""
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            raise BadUrl("not an IPv6 address") from None
        return f"[{host}]"
    if NOT_IN_A_DNS_NAME.search(host):
        # A space, a quote, a percent sign...: no DNS name holds one.
        raise BadUrl("not a valid DNS name")
    try:
        # What name resolution will need: a label empty or over 63 characters fails here, once,
        # rather than at every lookup of the host.
        host.encode("idna")
    except UnicodeError:
        raise BadUrl("not a valid DNS name") from None
    return host


def host_key(url: str) -> str:
    """The server a URL belongs to, as `host[:port]` of its canonical form.

    A server is what one connection reaches, so the port is part of it: two websim hosts on
    one address but different ports are two servers.
    """
    return urlsplit(url).netloc


def server_of(url: str) -> str:
    """`host_key` of a canonical URL, without parsing it (the hot paths: every link found)."""
    # A canonical URL reads scheme://server/...: the server is the third "/" field.
    return url.split("/", 3)[2]
