"""Address safety: refuse to connect to private, loopback, link-local, multicast and cloud
metadata addresses unless the user allowed it.

A crawler follows links that strangers write. Without this check, a page linking to
`http://169.254.169.254/` or `http://10.0.0.1/admin` turns the crawler into a proxy into the
network it runs in. Every resolved address of a host is checked, not just the first, because
the connection may use any of them; the fetcher then connects to a checked address, never
resolving the name again (a hostile DNS server could answer the check with a public address
and the connection with a private one: DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

from errors import ErrorClass, FetchError

Resolver = Callable[[str, int], list[str]]

# Cloud metadata endpoints that are not already link-local (AWS IPv6, Alibaba, Oracle).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)


class AddressRefused(Exception):
    """The host resolves to an address the crawler must not reach."""


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


# NAT64's well-known prefix (RFC 6052): the last 32 bits are an IPv4 address the gateway
# connects to.
NAT64_PREFIX = ipaddress.ip_network("64:ff9b::/96")
# IPv4-compatible IPv6 addresses (deprecated, RFC 4291), ::a.b.c.d.
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address that a connection to `ip` reaches through a translation or tunnel
    (mapped, 6to4, Teredo, NAT64, IPv4-compatible), or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in NAT64_PREFIX or (ip in IPV4_COMPATIBLE and int(ip) > 0xFFFF):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refusal_reason(address: str) -> str | None:
    """Why this address is off limits by default, or None when it is a public address. An
    IPv6 address that carries an IPv4 address is judged by the IPv4 address it reaches."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        ip = embedded_ipv4(ip) or ip
    if ip in METADATA_ADDRESSES:
        return "cloud metadata"
    for reason, flag in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        # Whatever else is not globally reachable: shared address space (100.64.0.0/10),
        # benchmarking, documentation and other special-purpose ranges.
        ("not public", not ip.is_global),
    ):
        if flag:
            return reason
    return None


# getaddrinfo's answers that say the name has no address (rather than "not now": EAI_AGAIN).
_NO_SUCH_NAME = {
    code
    for code in (
        getattr(socket, "EAI_NONAME", None),
        getattr(socket, "EAI_NODATA", None),
        getattr(socket, "EAI_FAIL", None),
    )
    if code is not None
}


def is_reserved_invalid(host: str) -> bool:
    """A name under `.invalid`, which never resolves (RFC 6761): answered here, no query
    sent."""
    return host.rstrip(".").lower().rpartition(".")[2] == "invalid"


def unresolvable(host: str, exc: OSError) -> FetchError | None:
    """The `dns_error` of a host whose name does not resolve, or None when the failure may
    pass (the resolver did not answer in time): each fetch then records its own."""
    if isinstance(exc, socket.gaierror) and exc.errno in _NO_SUCH_NAME:
        return FetchError(ErrorClass.DNS_ERROR, f"the name {host} does not resolve")
    return None


class AddressGuard:
    """Checks hosts before the crawler connects; remembers answers per host. `resolve`: names
    answered without asking DNS (`[fetch] resolve`); their addresses are checked like any."""

    def __init__(
        self,
        allow_private: bool,
        resolver: Resolver = system_resolver,
        resolve: Mapping[str, str] | None = None,
    ) -> None:
        self.allow_private = allow_private
        self._resolver = resolver
        self._resolve = {name.lower(): address for name, address in (resolve or {}).items()}
        self._verdicts: dict[str, str | list[str] | None] = {}

    def check_url(self, url: str) -> str | None:
        """The address to connect to for the URL's host: one that was checked, or None when
        nothing needs pinning (an IP literal). Raise AddressRefused if the host resolves to a
        refused address (OSError, a socket.gaierror, if it does not resolve at all; that is a
        network error, not a verdict, so it is not cached). A name is resolved here even when
        private addresses are allowed, so that the connection goes where `[fetch] resolve`
        says and a `.invalid` name never reaches a DNS server."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        key = f"{host}:{port}"
        if key not in self._verdicts:
            self._verdicts[key] = self._verdict(host, port)
        verdict = self._verdicts[key]
        if isinstance(verdict, str):
            raise AddressRefused(verdict)
        return verdict[0] if verdict and not _is_ip_literal(host) else None

    def _verdict(self, host: str, port: int) -> str | list[str] | None:
        """A refusal, or the checked addresses."""
        if self.allow_private and _is_ip_literal(host):
            return [host]  # nothing to resolve, nothing to refuse
        if host in self._resolve:
            addresses = [self._resolve[host]]
        elif is_reserved_invalid(host):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        else:
            addresses = self._resolver(host, port)
        if self.allow_private:
            return addresses
        for address in addresses:
            reason = refusal_reason(address)
            if reason is not None:
                return (
                    f"{host} resolves to {reason} address {address} "
                    "(pass --allow-private to crawl it)"
                )
        return addresses


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
