"""A server's queue of URLs: which of its URLs goes next (docs/scheduling.md's URL ranking, and the
round between URL families that keeps one family from starving the others)."""

from __future__ import annotations

import heapq
from bisect import insort
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from crawler.scope.traps import descending_family, url_family


@dataclass(slots=True)
class UrlTask:
    url: str
    depth: int
    attempt: int = 1
    quality: float = 0.0  # fixed when the URL was discovered (docs/scheduling.md)
    host_depth: int = 0  # links from where the crawl entered the URL's server
    urgent: bool = False  # goes before its server's round of families (a recrawl's changed URL)
    # Descending pages in a row that led to it (crawler.scope.traps.descends): from 1 on, the
    # URL is in its section's one descending family, and from 2 on in its trap budget.
    descent: int = 0


class UrlQueue(Protocol):
    """A server's queue of new URLs (retries wait apart, by time)."""

    def __len__(self) -> int: ...
    def push(self, task: UrlTask) -> None: ...
    def push_front(self, task: UrlTask) -> None: ...
    def pop(self) -> UrlTask: ...
    def drain(self) -> list[UrlTask]: ...
    def drain_family(self, family: str) -> list[UrlTask]: ...
    def set_head_size(self, size: int) -> None: ...
    def best_quality(self) -> float: ...
    def top_quality_sum(self) -> float: ...


class FifoUrls:
    """First in, first out: breadth-first and performance-first, which ignore quality."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque[UrlTask] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def push(self, task: UrlTask) -> None:
        self._items.append(task)

    def push_front(self, task: UrlTask) -> None:
        self._items.appendleft(task)

    def pop(self) -> UrlTask:
        return self._items.popleft()

    def drain(self) -> list[UrlTask]:
        tasks = list(self._items)
        self._items.clear()
        return tasks

    # The FIFO policies rank servers without looking at URL quality.
    def set_head_size(self, size: int) -> None:
        pass

    def best_quality(self) -> float:
        return 0.0

    def top_quality_sum(self) -> float:
        return 0.0


# (-quality, order, task): tuples compare in C, and the order (unique) keeps equal qualities
# first in, first out and never lets the comparison reach the task.
_Entry = tuple[float, int, UrlTask]


class QualityUrls:
    """Best quality first, ties in arrival order.

    The best `head_size` entries are kept in a sorted list and the rest in a heap, and the sum
    of the head's qualities is kept up to date: crawl-capability needs the sum of the next
    P(s,i) qualities every time a server is ranked, which this makes O(1) to read and
    O(P + log n) to maintain, where `heapq.nlargest` would cost O(n) per ranking. The sum is
    updated by adding and subtracting; its rounding error is below 1e-15 of the largest quality
    the head ever held, far below any difference that matters for ranking.
    """

    __slots__ = ("_head", "_tail", "_head_size", "_head_sum", "_order", "_front")

    def __init__(self, head_size: int = 1) -> None:
        self._head: list[_Entry] = []  # sorted, best first; full before the tail gets any
        self._tail: list[_Entry] = []  # heap of the rest
        self._head_size = max(1, head_size)
        self._head_sum = 0.0
        self._order = 0
        self._front = 0  # put-back entries count down, so they precede equal qualities

    def __len__(self) -> int:
        return len(self._head) + len(self._tail)

    def push(self, task: UrlTask) -> None:
        self._order += 1
        self._insert((-task.quality, self._order, task))

    def push_front(self, task: UrlTask) -> None:
        self._front -= 1
        self._insert((-task.quality, self._front, task))

    def _insert(self, entry: _Entry) -> None:
        head = self._head
        if len(head) < self._head_size:
            insort(head, entry)
            self._head_sum -= entry[0]
        elif entry < head[-1]:
            insort(head, entry)
            worst = head.pop()
            self._head_sum += worst[0] - entry[0]
            heapq.heappush(self._tail, worst)
        else:
            heapq.heappush(self._tail, entry)

    def pop(self) -> UrlTask:
        entry = self._head.pop(0)  # O(P) memmove of pointers: cheap next to a heap pop
        self._head_sum += entry[0]
        if self._tail:
            # The tail's best is worse than everything left in the head: it goes last.
            refill = heapq.heappop(self._tail)
            self._head.append(refill)
            self._head_sum -= refill[0]
        if not self._head:
            self._head_sum = 0.0  # drop the rounding residue
        return entry[2]

    def drain(self) -> list[UrlTask]:
        tasks = [entry[2] for entry in self._head] + [entry[2] for entry in self._tail]
        self._head.clear()
        self._tail.clear()
        self._head_sum = 0.0
        return tasks

    def set_head_size(self, size: int) -> None:
        self._head_size = size = max(1, size)
        head = self._head
        while len(head) > size:
            worst = head.pop()
            self._head_sum += worst[0]
            heapq.heappush(self._tail, worst)
        while len(head) < size and self._tail:
            refill = heapq.heappop(self._tail)
            head.append(refill)
            self._head_sum -= refill[0]

    def best_quality(self) -> float:
        return -self._head[0][0] if self._head else 0.0

    def top_quality_sum(self) -> float:
        return self._head_sum

    def head_qualities(self) -> list[float]:
        """The qualities of the head, best first."""
        return [-entry[0] for entry in self._head]


_URGENT = "!urgent"  # the key of urgent URLs; every real family starts with "/"


def _family_of(task: UrlTask) -> str:
    if task.urgent:
        return _URGENT
    # A generator of ever-deeper fresh paths makes a new directory (so a new `url_family`) at
    # every URL: its URLs take one turn of the round between them, not one each.
    return descending_family(task.url) if task.descent else url_family(task.url)


class FairUrls:
    """A server's queue: round-robin between its URL families (crawler.scope.traps.url_family;
    the URLs a section's descending pages led to are one family, `descending_family`), each
    family's URLs in the policy's order (best quality first, or first in, first out).

    So no family starves the others: a link from the front page waits for at most one URL of
    each other family, however many URLs a calendar or a page of 100,000 links queued before
    it. A family joins the round at the back when it gets its first URL; a URL put back goes
    first again. For ranking the server, the queue reports the qualities of the URLs it will
    really give next: the head of the family whose turn it is (quality-first), or the sum over
    the next `head_size` URLs of the round (crawl-capability, computed when asked after a
    change, O(head_size)). Urgent URLs (a recrawl's URLs whose sitemap says they changed) go
    before the round, in the policy's order.
    """

    __slots__ = ("_families", "_turns", "_quality", "_head_size", "_size", "_sum")

    def __init__(self, quality_ordered: bool, head_size: int = 1) -> None:
        self._families: dict[str, FifoUrls | QualityUrls] = {}
        self._turns: deque[str] = deque()  # families with URLs, the one whose turn it is first
        self._quality = quality_ordered
        self._head_size = max(1, head_size)
        self._size = 0
        self._sum: float | None = None  # top_quality_sum, None once stale

    def __len__(self) -> int:
        return self._size

    def _family_queue(self, family: str) -> FifoUrls | QualityUrls:
        queue = self._families.get(family)
        if queue is None:
            queue = self._families[family] = (
                QualityUrls(self._head_size) if self._quality else FifoUrls()
            )
        return queue

    def push(self, task: UrlTask) -> None:
        family = _family_of(task)
        queue = self._family_queue(family)
        if not queue and family is not _URGENT:
            self._turns.append(family)
        queue.push(task)
        self._size += 1
        self._sum = None

    def push_front(self, task: UrlTask) -> None:
        family = _family_of(task)
        queue = self._family_queue(family)
        if family is not _URGENT:
            if queue:
                self._turns.remove(family)  # rare (a URL put back): O(families) is fine
            self._turns.appendleft(family)
        queue.push_front(task)
        self._size += 1
        self._sum = None

    def pop(self) -> UrlTask:
        urgent = self._families.get(_URGENT)
        if urgent:
            family, queue = _URGENT, urgent
        else:
            family = self._turns[0]
            queue = self._families[family]
        task = queue.pop()
        if queue:
            if family is not _URGENT:
                self._turns.rotate(-1)
        else:
            if family is not _URGENT:
                self._turns.popleft()
            del self._families[family]
        self._size -= 1
        self._sum = None
        return task

    def drain(self) -> list[UrlTask]:
        tasks = [task for queue in self._families.values() for task in queue.drain()]
        self._families.clear()
        self._turns.clear()
        self._size = 0
        self._sum = None
        return tasks

    def drain_family(self, family: str) -> list[UrlTask]:
        """Take out every URL of one family (it kept failing)."""
        queue = self._families.pop(family, None)
        if queue is None:
            return []
        self._turns.remove(family)
        tasks = queue.drain()
        self._size -= len(tasks)
        self._sum = None
        return tasks

    def set_head_size(self, size: int) -> None:
        size = max(1, size)
        if size != self._head_size:
            self._head_size = size
            for queue in self._families.values():
                queue.set_head_size(size)
            self._sum = None

    def best_quality(self) -> float:
        urgent = self._families.get(_URGENT)
        if urgent:
            return urgent.best_quality()
        return self._families[self._turns[0]].best_quality() if self._turns else 0.0

    def top_quality_sum(self) -> float:
        if not self._quality:
            return 0.0
        if self._sum is None:
            families = self._families
            heads = [families[family].head_qualities() for family in self._turns]  # type: ignore[union-attr]
            urgent = families[_URGENT].head_qualities() if _URGENT in families else []  # type: ignore[union-attr]
            total = sum(urgent[: self._head_size])
            left, depth = self._head_size - min(self._head_size, len(urgent)), 0
            while left and heads:
                heads = [head for head in heads if depth < len(head)]
                for head in heads[:left]:
                    total += head[depth]
                left -= min(left, len(heads))
                depth += 1
            self._sum = total
        return self._sum
