"""Writes about one object, in the order they were asked for, on a shared thread pool.

Two reports about the same pod submitted to a pool of two threads can reach the apiserver in either order: a pod
gated for "ResourceClaim not created yet" and tried again a few milliseconds later (the claim came) could be left
showing the older message, with nothing to correct it. Here the calls for one key run one at a time, oldest first;
calls for different keys still run side by side.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

log = logging.getLogger(__name__)


class InOrder:
    """Runs each call on `pool`, never two of one key at once, and those of one key in submission order."""

    def __init__(self, pool: Executor):
        self._pool = pool
        self._lock = threading.Lock()
        self._waiting: dict[str, collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]]] = {}

    def submit(self, key: str, call: Callable[..., Any], *args: Any) -> None:
        """Queue `call(*args)` behind the calls of `key` not yet run. Raises RuntimeError once the pool is shut
        down, as Executor.submit does."""
        with self._lock:
            waiting = self._waiting.get(key)
            if waiting is not None:  # a drain of this key is queued or running: it will take this one too
                waiting.append((call, args))
                return
            self._waiting[key] = collections.deque([(call, args)])
        try:
            self._pool.submit(self._drain, key)
        except RuntimeError:
            with self._lock:
                del self._waiting[key]
            raise

    def _drain(self, key: str) -> None:
        while True:
            with self._lock:
                waiting = self._waiting[key]
                if not waiting:
                    del self._waiting[key]
                    return
                call, args = waiting.popleft()
            try:
                call(*args)
            except Exception:  # one failed write must not strand the calls queued behind it
                log.exception("%s for %s failed", getattr(call, "__qualname__", "a call"), key)
