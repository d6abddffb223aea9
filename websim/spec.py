"""The knobs of a synthetic web. Every field has a default that gives a small, fast, polite web;
tests and benchmarks override what they need."""

from __future__ import annotations

from dataclasses import dataclass

from websim.physical import PhysicalQueue

# Host i listens on 127.0.{1 + i // 250}.{1 + i % 250}; the third octet must stay <= 255.
MAX_HOSTS = 255 * 250


@dataclass(frozen=True)
class WebSpec:
    hosts: int = 20
    pages: int = 2000
    seed: int = 1

    # Link graph. Out-degree is power-law with this mean; targets are drawn with Zipf weights
    # so in-degree is heavy-tailed too.
    links_per_page: int = 12
    same_host_link_share: float = 0.85
    # Average body size in bytes; text padding fills a page up to its drawn size.
    page_bytes: int = 4000

    # Page mix (the rest are ordinary HTML pages).
    private_share: float = 0.06  # pages under /private/ (disallowed on hosts with robots rules)
    pdf_share: float = 0.03  # application/pdf resources, no out-links
    base_href_share: float = 0.1  # HTML pages that carry a <base href>
    mailto_share: float = 0.05  # HTML pages with a mailto: link, which is not a page

    # Host profiles. Each host's median latency is drawn log-uniformly from this range, and each
    # response's latency from a lognormal around that median.
    latency_ms: tuple[float, float] = (2.0, 30.0)
    latency_sigma: float = 0.5
    # The median latency is the network's, added by a delay line (websim/wire.py), where a
    # TCP handshake shows it: the server's own delay leaves it out (a degrading host then
    # draws only its time in the server; other hosts answer at once).
    latency_on_wire: bool = False
    # Requests a host serves per connection before it answers `Connection: close`; the default
    # mix follows the measured web (24% HTTP/1.0 style, most allow 100).
    keepalive_max: tuple[int, ...] = (1, 100, 10)
    keepalive_weights: tuple[float, ...] = (0.24, 0.66, 0.10)
    # Hidden per-host token bucket (rate drawn log-uniformly); None disables rate limits.
    rate_limit_rps: tuple[float, float] | None = (5.0, 50.0)
    rate_limit_burst_s: float = 1.0  # bucket capacity, in seconds' worth of tokens
    # Degrading hosts (websim/queueing.py): each host serves one request at a time at a
    # capacity drawn log-uniformly from this range (requests/s), so its response time grows with
    # the rate it is asked at, and it never answers 429/503. None: response times ignore load.
    capacity_rps: tuple[float, float] | None = None
    # Physical queue hosts (websim/physical.py): host i is served by queues[i], W workers
    # behind one FIFO queue shared with background users, so its response time grows because
    # requests really wait; its latency_ms is network latency on top. Empty: no such hosts;
    # else one per host, and no capacity_rps.
    queues: tuple[PhysicalQueue, ...] = ()
    # Pages split evenly over the hosts instead of the skewed (Zipf) split: a benchmark that
    # compares servers wants each crawled for about as long.
    even_host_sizes: bool = False
    # An oracle for benchmarks: every degrading host's robots.txt asks for a Crawl-delay of one
    # over the rate at which its median response time reaches this multiple of the unloaded
    # one, so a crawl that keeps Crawl-delay is held at that rate. None: no such Crawl-delay.
    crawl_delay_at_inflation: float | None = None
    # robots.txt: this share of hosts disallows /private/; of those, crawl_delay_share also
    # asks for a Crawl-delay (0 disables it).
    robots_share: float = 0.3
    crawl_delay_share: float = 0.5
    crawl_delay_s: float = 0.05

    # Connections idle this long are closed by the server, as real servers do.
    idle_timeout_s: float = 15.0
    # Render every page once at start and serve the bytes, as a static site served from the
    # file cache does: websim's rendering then takes no CPU from a crawler measured on the same
    # machine. Costs about pages x page_bytes of memory and a start-up of 0.3 ms a page.
    static: bool = False

    # Change between nights (websim/changes.py): the expected share of pages that change in one
    # night, the shape of the gamma distribution of per-page change rates (small: skewed), the
    # share of servers whose validators are missing or wrong (split evenly: none, an ETag new on
    # every answer, a Last-Modified that never changes), and the share of the other servers
    # that publish a sitemap.
    change_share: float = 0.1
    change_shape: float = 0.5
    validator_fault_share: float = 0.06
    sitemap_share: float = 0.0

    # Hostile hosts (websim/hostile/): each named scenario is served on its own address after
    # the web's hosts. Not linked from the web: a crawl seeds them (`WebSim.hostile_url`).
    hostile: tuple[str, ...] = ()
    hostile_drip_s: float = 1.0  # seconds between the bytes of a dripping response
    hostile_body_bytes: int = 1_000_000_000  # size of the huge body and of the gzip bomb
    hostile_many_links: int = 100_000  # links on the many-links page

    def __post_init__(self) -> None:
        if not 1 <= self.hosts <= MAX_HOSTS - len(self.hostile):
            raise ValueError(f"hosts plus hostile hosts must be in 1..{MAX_HOSTS}")
        if self.hostile_drip_s < 0 or self.hostile_body_bytes < 0 or self.hostile_many_links < 0:
            raise ValueError("hostile_drip_s, hostile_body_bytes, hostile_many_links must be >= 0")
        if self.pages < self.hosts:
            raise ValueError("pages must be >= hosts (every host has a root page)")
        if self.links_per_page < 1 or self.page_bytes < 0:
            raise ValueError("links_per_page must be >= 1 and page_bytes >= 0")
        lo, hi = self.latency_ms
        if not 0 <= lo <= hi:
            raise ValueError("latency_ms must be (low, high) with 0 <= low <= high")
        if len(self.keepalive_max) != len(self.keepalive_weights) or min(self.keepalive_max) < 1:
            raise ValueError("keepalive_max and keepalive_weights must pair up, values >= 1")
        if (
            self.rate_limit_rps is not None
            and not 0 < self.rate_limit_rps[0] <= (self.rate_limit_rps[1])
        ):
            raise ValueError("rate_limit_rps must be (low, high) with 0 < low <= high, or None")
        if self.capacity_rps is not None and not 0 < self.capacity_rps[0] <= self.capacity_rps[1]:
            raise ValueError("capacity_rps must be (low, high) with 0 < low <= high, or None")
        if self.queues and (len(self.queues) != self.hosts or self.capacity_rps is not None):
            raise ValueError("queues needs one PhysicalQueue per host, and no capacity_rps")
        if self.crawl_delay_at_inflation is not None and (
            self.capacity_rps is None or self.crawl_delay_at_inflation <= 1
        ):
            raise ValueError("crawl_delay_at_inflation needs capacity_rps and must be > 1")
        shares = (
            self.same_host_link_share,
            self.private_share,
            self.pdf_share,
            self.base_href_share,
            self.mailto_share,
            self.robots_share,
            self.crawl_delay_share,
            self.validator_fault_share,
            self.sitemap_share,
        )
        if not all(0.0 <= s <= 1.0 for s in shares) or self.private_share + self.pdf_share > 1:
            raise ValueError("shares must be in [0, 1]")
        if not 0.0 <= self.change_share < 1.0 or self.change_shape <= 0:
            raise ValueError("change_share must be in [0, 1) and change_shape > 0")


def host_address(host: int) -> str:
    """The loopback IP literal that host number `host` is served on (and named by in URLs)."""
    return f"127.0.{1 + host // 250}.{1 + host % 250}"
