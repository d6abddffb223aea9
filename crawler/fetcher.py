"""HTTP fetching over persistent per-server sessions (requests), with a body size limit."""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass, field

import requests
from requests.adapters import HTTPAdapter

from crawler.config import CrawlConfig


@dataclass
class FetchResult:
    url: str
    status: int | None = None
    error: str | None = None  # "class: detail" when no usable response arrived
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    rtt_s: float | None = None
    truncated: bool = False

    @property
    def mime_type(self) -> str | None:
        value = self.headers.get("content-type")
        return value.split(";", 1)[0].strip().lower() or None if value else None

    @property
    def charset(self) -> str | None:
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.partition("=")
            if key.strip().lower() == "charset":
                return value.strip().strip('"').lower() or None
        return None

    @property
    def digest(self) -> str | None:
        """SHA-1 of the body in base32, the form Common Crawl's `content_digest` uses."""
        if self.status is None:
            return None
        return base64.b32encode(hashlib.sha1(self.body).digest()).decode("ascii")


def classify(exc: requests.RequestException) -> str:
    """Error class for the `error` column: a short stable name, then the detail."""
    if isinstance(exc, requests.ConnectTimeout):
        kind = "connect_timeout"
    elif isinstance(exc, requests.ReadTimeout):
        kind = "read_timeout"
    elif isinstance(exc, requests.ConnectionError):
        kind = "connection_error"
    elif isinstance(exc, requests.TooManyRedirects | requests.exceptions.InvalidURL):
        kind = "invalid_url"
    else:
        kind = "http_error"
    return f"{kind}: {str(exc)[:200]}"


class ServerSession:
    """One keep-alive connection's worth of state for one server.

    Exactly one connection per server: the pool holds a single connection and requests over it
    are sequential, so the server sees the crawler as one polite client.
    """

    def __init__(self, config: CrawlConfig) -> None:
        self._config = config
        self._session = requests.Session()
        self._session.headers["User-Agent"] = config.user_agent
        self._session.mount("http://", HTTPAdapter(pool_connections=1, pool_maxsize=1))
        self._session.mount("https://", HTTPAdapter(pool_connections=1, pool_maxsize=1))

    def get(self, url: str) -> FetchResult:
        config = self._config
        started = time.monotonic()
        try:
            response = self._session.get(
                url,
                stream=True,
                allow_redirects=False,
                timeout=(config.connect_timeout_s, config.read_timeout_s),
            )
        except requests.RequestException as exc:
            return FetchResult(url=url, error=classify(exc))
        result = FetchResult(
            url=url,
            status=response.status_code,
            headers={k.lower(): v for k, v in response.headers.items()},
            rtt_s=time.monotonic() - started,
        )
        try:
            chunks: list[bytes] = []
            received = 0
            for chunk in response.iter_content(chunk_size=65536):
                chunks.append(chunk)
                received += len(chunk)
                if received > config.max_body_bytes:
                    result.truncated = True
                    break
            result.body = b"".join(chunks)[: config.max_body_bytes]
        except requests.RequestException as exc:
            result.error = classify(exc)
        finally:
            response.close()
        if result.truncated:
            result.error = f"body_too_large: more than {config.max_body_bytes} bytes"
        return result

    def close(self) -> None:
        self._session.close()
