"""The scheduling queue: which pending pod to try next, and when to try a failed one again.

As kube-scheduler's: active pods by priority, then arrival; a pod that failed waits out a
per-pod exponential backoff; a pod that fitted nowhere parks in the unschedulable pool
until something in the cluster changes that could make room (a node added or changed, a
pod removed), and, as a safety net, for at most `max_park` seconds. No busy polling: the
caller sleeps until `next_ready_in()`. Pure: time is passed in.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field


@dataclass
class _Entry:
    key: str
    priority: int
    attempts: int = 0
    ready_at: float = 0.0  # backoff: not before this time
    parked_at: float | None = None  # in the unschedulable pool since
    arrival: int = 0


@dataclass
class SchedulingQueue:
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    max_park: float = 300.0
    _entries: dict[str, _Entry] = field(default_factory=dict)
    _heap: list[tuple[int, int, str]] = field(default_factory=list)  # (-priority, arrival, key)
    _counter: itertools.count = field(default_factory=itertools.count)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def add(self, key: str, priority: int = 0) -> None:
        """A pending pod, new or updated. An update does not wake a parked pod: only a cluster change does
        (our own PodScheduled=False write is an update too)."""
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(key, priority, arrival=next(self._counter))
        elif entry.priority == priority:
            return
        entry.priority = priority
        if entry.parked_at is None:
            heapq.heappush(self._heap, (-priority, entry.arrival, key))

    def remove(self, key: str) -> None:
        self._entries.pop(key, None)

    def pop(self, now: float) -> str | None:
        """The next pod to try: highest priority, then earliest arrival, among those not backing off."""
        deferred = []
        found = None
        while self._heap:
            item = heapq.heappop(self._heap)
            entry = self._entries.get(item[2])
            if entry is None or entry.parked_at is not None or (-entry.priority, entry.arrival) != item[:2]:
                continue  # stale heap item
            if entry.ready_at > now:
                deferred.append(item)
                continue
            found = entry.key
            break
        for item in deferred:
            heapq.heappush(self._heap, item)
        if found is not None:
            self._entries[found].attempts += 1
        return found

    def failed(self, key: str, now: float, *, unschedulable: bool) -> None:
        """The attempt did not bind: back off, and if no node fitted, park until the cluster changes."""
        entry = self._entries.get(key)
        if entry is None:
            return
        backoff = min(self.initial_backoff * 2 ** max(entry.attempts - 1, 0), self.max_backoff)
        entry.ready_at = now + backoff
        if unschedulable:
            entry.parked_at = now
        else:
            entry.parked_at = None  # an error, not a verdict on the cluster: back off, then try again
            heapq.heappush(self._heap, (-entry.priority, entry.arrival, key))

    def activate(self, key: str) -> None:
        """What kept a parked pod out (a scheduling gate) is gone: it may be tried at once."""
        entry = self._entries.get(key)
        if entry is None:
            return
        entry.ready_at = 0.0
        if entry.parked_at is not None:
            entry.parked_at = None
            heapq.heappush(self._heap, (-entry.priority, entry.arrival, key))

    def done(self, key: str) -> None:
        """Bound: forget it."""
        self._entries.pop(key, None)

    def cluster_changed(self) -> int:
        """Something could have made room: every parked pod becomes eligible (after its backoff)."""
        moved = 0
        for entry in self._entries.values():
            if entry.parked_at is not None:
                entry.parked_at = None
                heapq.heappush(self._heap, (-entry.priority, entry.arrival, entry.key))
                moved += 1
        return moved

    def flush_parked(self, now: float) -> None:
        """Parked longer than `max_park`: try again anyway (upstream's periodic flush)."""
        for entry in self._entries.values():
            if entry.parked_at is not None and now - entry.parked_at >= self.max_park:
                entry.parked_at = None
                heapq.heappush(self._heap, (-entry.priority, entry.arrival, entry.key))

    def next_ready_in(self, now: float) -> float | None:
        """Seconds until some pod becomes eligible; 0 if one is now; None if none is waiting."""
        waits = [max(e.ready_at - now, 0.0) for e in self._entries.values() if e.parked_at is None]
        parked = [e.parked_at + self.max_park - now for e in self._entries.values() if e.parked_at is not None]
        candidates = waits + [max(p, 0.0) for p in parked]
        return min(candidates) if candidates else None

    def pending(self) -> int:
        return len(self._entries)

    def parked(self) -> int:
        return sum(1 for e in self._entries.values() if e.parked_at is not None)
