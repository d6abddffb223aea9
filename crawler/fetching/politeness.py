"""Politeness primitives: Retry-After parsing, backoff, per-URL retry decisions, robots.txt rules,
and the `[retry]` settings section.

Everything here is pure: time comes in as arguments, randomness from a `random.Random` the
caller seeds, so the node loop stays reproducible and the unit tests need no clock or network.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from protego import Protego

# Protego's own reading of a line, so that the rule cap counts exactly the rules it would keep
# (its spelling variants too). Private names: protego is pinned in constraints.txt, and
# tests/test_bounds.py fails if a new version reads lines differently.
from protego._protego import (
    _ALLOW_DIRECTIVE,
    _DISALLOW_DIRECTIVE,
    _SITE_WIDE_DIRECTIVES,
    _USER_AGENT_DIRECTIVE,
    _extract_directive,
)
from pydantic import Field, model_validator

# Which results are worth another try is the commit/resume rule's, defined once in storage.
from crawler.section import Section
from errors import FetchError, is_retryable

# Host-level "slow down" signals: the server is refusing work because of our rate.
BAN_STATUSES = frozenset({429, 503})

# delay-seconds is a non-negative integer (RFC 9110); a fraction is tolerated, nothing else
# (no sign, exponent, "nan" or digit separators).

# RFC 9309 asks crawlers to parse at least 500 KiB of a robots.txt; past that, we stop reading.
ROBOTS_MAX_CHARS = 500 * 1024
# Allow/Disallow rules kept per user agent (`[fetch] robots_max_rules`): checking a URL costs up
# to one match per rule of its agent, and 500 KiB hold about 25,000 of them (26 ms of CPU per
# URL checked, issue 29). Real files stay far below: Wikipedia's has about 500 lines.
ROBOTS_MAX_RULES = 1000
_RULE_DIRECTIVES = _ALLOW_DIRECTIVE | _DISALLOW_DIRECTIVE


class Backoff:
    """Exponential backoff with "full jitter": attempt k waits uniform(0, min(cap, base*2**(k-1))).

    Full jitter spreads retries of many clients (or many URLs) over the whole window, which
    avoids synchronized retry storms. With `rng=None` the upper bound itself is returned, for
    callers that need a deterministic pause (one host, one connection: nothing to desynchronize).
    """

    def __init__(self, base_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        if base_s <= 0 or cap_s < base_s:
            raise ValueError("backoff needs 0 < base_s <= cap_s")
        self.base_s = base_s
        self.cap_s = cap_s
        self._rng = rng

    def ceiling(self, attempt: int) -> float:
        """The un-jittered wait for `attempt` (1 = first retry)."""
        # Exponent capped so huge attempt numbers cannot overflow the float.
        return min(self.cap_s, self.base_s * 2.0 ** min(max(attempt, 1) - 1, 60))

    def delay(self, attempt: int) -> float:
        ceiling = self.ceiling(attempt)
        return ceiling if self._rng is None else self._rng.uniform(0.0, ceiling)


class RetrySettings(Section):
    """The `[retry]` section: the retry budget of a URL, and how long a server is left alone
    after "not now" (the per-URL retries here and the host pauses of every rate controller)."""

    max_retries: int = Field(
        3, ge=0, description="retries of one URL before it is recorded as failed"
    )
    retry_after_max_s: float = Field(
        120.0, gt=0, description="longest Retry-After honoured; longer ones are clamped"
    )
    backoff_base_s: float = Field(
        1.0, gt=0, description="first wait of the exponential backoff without Retry-After"
    )
    backoff_cap_s: float = Field(60.0, gt=0, description="longest wait of that backoff")
    failure_budget_s: float = Field(
        120.0,
        gt=0,
        description="time one server's failed requests (timeouts, 429/503, 5xx) may take, "
        "plus a tenth of the time its answers took; past it, its failing URLs are not retried "
        "and its new URLs get a quarter of fetch_timeout_s",
    )

    @model_validator(mode="after")
    def _ordered(self) -> RetrySettings:
        if self.backoff_base_s > self.backoff_cap_s:
            raise ValueError("need backoff_base_s <= backoff_cap_s")
        return self


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay_s: float = 0.0


class RetryPolicy:
    """Per-URL retries: which results to retry, after how long, and when to give up.

    `attempt` counts tries of one URL (1 = the first fetch). A retryable result of attempt k is
    retried while k <= max_retries, so a URL gets at most 1 + max_retries fetches; after that
    the caller records it as failed. The wait is the server's Retry-After when it sent one
    (clamped to `retry_after_max_s` where the header is read, `parse_retry_after`), else
    backoff with full jitter.
    """

    def __init__(self, settings: RetrySettings, rng: random.Random | None = None) -> None:
        self.max_retries = settings.max_retries
        # The default RNG is seeded so two runs with the same inputs retry at the same times.
        self._backoff = Backoff(
            settings.backoff_base_s, settings.backoff_cap_s, rng or random.Random(0)
        )

    def decide(
        self,
        attempt: int,
        status: int | None,
        error: FetchError | str | None = None,
        retry_after_s: float | None = None,
    ) -> RetryDecision:
        if not is_retryable(status, error) or attempt > self.max_retries:
            return RetryDecision(retry=False)
        if retry_after_s is not None:
            return RetryDecision(retry=True, delay_s=retry_after_s)
        return RetryDecision(retry=True, delay_s=self._backoff.delay(attempt))

    def retry_delay(
        self,
        attempt: int,
        status: int | None,
        error: FetchError | str | None = None,
        retry_after_s: float | None = None,
    ) -> float | None:
        """`decide` in one value: seconds until the retry, or None for "do not retry"."""
        decision = self.decide(attempt, status, error, retry_after_s)
        return decision.delay_s if decision.retry else None


class RobotsRules:
    """The robots.txt rules of one host, with the RFC 9309 cases for a failed fetch.

    - 2xx: the parsed text. Protego tolerates garbage (HTML error pages served as 200, binary
      junk): lines it cannot read are ignored, which leaves everything allowed.
    - 4xx (404, 410, also 401/403): "unavailable", no rules, everything is allowed
      (`allow_all`).
    - 5xx, 429 or no answer: "unreachable". RFC 9309 says to assume everything is disallowed;
      Google stops crawling the host and asks again later. We do the same: `unreachable()`
      disallows every URL and carries `retry_at`, the time the caller should fetch robots.txt
      again and replace these rules. Giving up after repeated failures is the caller's call.
    """

    def __init__(
        self,
        parser: Protego | None,
        disallow_all: bool = False,
        retry_at: float | None = None,
        rules_dropped: int = 0,
    ) -> None:
        self._parser = parser
        self._disallow_all = disallow_all
        self.retry_at = retry_at
        self.rules_dropped = rules_dropped  # past `max_rules` (see `from_text`)

    @classmethod
    def from_text(cls, text: str, max_rules: int = ROBOTS_MAX_RULES) -> RobotsRules:
        """The rules of the first `ROBOTS_MAX_CHARS` of a robots.txt, and of those the first
        `max_rules` Allow/Disallow rules that apply to each user agent, in the file's order:
        the later ones are ignored as the bytes past the size limit are, so checking a URL
        costs at most `max_rules` matches whatever the file holds."""
        lines, dropped = capped_rules(text[:ROBOTS_MAX_CHARS], max_rules)
        return cls(Protego.parse("\n".join(lines)), rules_dropped=dropped)

    @classmethod
    def allow_all(cls) -> RobotsRules:
        return cls(None)

    @classmethod
    def unreachable(cls, now: float, retry_in_s: float) -> RobotsRules:
        return cls(None, disallow_all=True, retry_at=now + retry_in_s)

    @classmethod
    def from_response(
        cls,
        status: int | None,
        text: str | None,
        now: float,
        retry_in_s: float,
        max_rules: int = ROBOTS_MAX_RULES,
    ) -> RobotsRules:
        """Rules for a robots.txt fetch that ended with `status` (None: no answer)."""
        if status is None or status >= 500 or status == 429:
            return cls.unreachable(now, retry_in_s)
        if 200 <= status < 300:
            return cls.from_text(text or "", max_rules)
        # 3xx left here means the redirect was not followed to a robots file: treat as missing.
        return cls.allow_all()

    @property
    def is_unreachable(self) -> bool:
        return self._disallow_all

    def allowed(self, url: str, user_agent: str) -> bool:
        if self._disallow_all:
            return False
        if self._parser is None:
            return True
        return self._parser.can_fetch(url, user_agent)

    @property
    def sitemaps(self) -> list[str]:
        """The `Sitemap:` URLs the robots.txt names."""
        return [] if self._parser is None else list(self._parser.sitemaps)

    def crawl_delay(self, user_agent: str) -> float | None:
        """Seconds between requests the host asks for: `Crawl-delay`, or `Request-rate` turned
        into a delay (n requests per m seconds -> m/n), whichever is longer."""
        if self._parser is None:
            return None
        delays = []
        crawl_delay = self._parser.crawl_delay(user_agent)
        if crawl_delay is not None and crawl_delay >= 0:
            delays.append(float(crawl_delay))
        rate = self._parser.request_rate(user_agent)
        if rate is not None and rate.requests > 0:
            delays.append(rate.seconds / rate.requests)
        return max(delays) if delays else None


def capped_rules(text: str, max_rules: int) -> tuple[list[str], int]:
    """The lines of a robots.txt without the Allow/Disallow lines past the first `max_rules`
    rules of any user agent they apply to, and how many lines were left out.

    Counted as protego builds its rule sets: a group (user-agent lines, then rules) adds its
    rules to the set of every agent it names, groups naming one agent share that set, and an
    agent with a `*` inside also names the agent without it. A line counts as the rules protego
    makes of it (two for a `$` or an allowed `index.html`). A line is kept only while every
    set it goes to has room, so no set ever holds more than `max_rules` rules."""
    kept: list[str] = []
    counts: dict[str, int] = {}
    group: set[str] = set()  # the rule sets the current group's rules go to
    previous: str | None = None  # the field of the last line that counts for grouping
    dropped = 0
    for line in text.splitlines():
        content = line.split("#", 1)[0].strip()
        parsed = _extract_directive(content) if content else None
        if parsed is None:
            kept.append(line)
            continue
        field, value = parsed
        if field in _USER_AGENT_DIRECTIVE:
            if previous is not None and previous not in _USER_AGENT_DIRECTIVE:
                group = set()
            agent = value.strip().lower()
            group |= {agent, agent.replace("*", "") if agent != "*" else ""} - {""}
        elif value and group and field in _RULE_DIRECTIVES:
            rules = 2 if "$" in value or value.endswith("index.html") else 1
            if any(counts.get(name, 0) + rules > max_rules for name in group):
                dropped += 1
                previous = field
                continue
            for name in group:
                counts[name] = counts.get(name, 0) + rules
        if field not in _SITE_WIDE_DIRECTIVES:
            previous = field
        kept.append(line)
    return kept, dropped
