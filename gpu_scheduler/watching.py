"""List-then-watch of one kind of object, in the manner of client-go's reflector.

The kubernetes client's `Watch` streams events from a resourceVersion; this adds what an
informer needs around it: an initial list whose items replace the cache, watching on
from the list's resourceVersion, a relist on 410 Gone or a broken stream, and backoff
while the API cannot be reached, so the cache heals itself without a restart.
Objects are handed over as the API's JSON (dicts): the pure core reads that shape, and
skipping the client's model classes keeps a busy pod watch cheap.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

log = logging.getLogger(__name__)

GONE = 410


class Reflector:
    """Keeps a consumer in step with the API: `on_replace(items)` after each list, `on_event(type, obj)` after.

    Callbacks run on the reflector's own thread and receive plain dicts.
    """

    def __init__(
        self,
        list_call: Callable[..., Any],
        *,
        name: str,
        on_replace: Callable[[list[Any]], None],
        on_event: Callable[[str, Any], None],
        on_failure: Callable[[Exception], None] | None = None,
        list_kwargs: dict[str, Any] | None = None,
        watch_seconds: int = 240,
        request_timeout: float = 10.0,
        max_backoff: float = 10.0,
    ):
        self.name = name
        self._list_call = list_call
        self._list_kwargs = list_kwargs or {}
        self._on_replace = on_replace
        self._on_event = on_event
        self._on_failure = on_failure
        self._watch_seconds = watch_seconds
        self._request_timeout = request_timeout
        self._max_backoff = max_backoff
        self._stopped = threading.Event()
        self._watch: watch.Watch | None = None
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"reflector-{name}", daemon=True)

    def start(self) -> Reflector:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        if self._watch is not None:
            self._watch.stop()

    def _run(self) -> None:
        backoff = 0.2
        while not self._stopped.is_set():
            try:
                resource_version = self._list()
                backoff = 0.2
                self._watch_from(resource_version)
            except ApiException as err:
                if err.status == GONE:
                    log.info("%s: watch expired (410 Gone), listing again", self.name)
                    continue
                self._failed(err, backoff)
                backoff = min(backoff * 2, self._max_backoff)
            except (HTTPError, OSError, ValueError) as err:
                self._failed(err, backoff)
                backoff = min(backoff * 2, self._max_backoff)

    def _list(self) -> str:
        response = self._list_call(**self._list_kwargs, _request_timeout=self._request_timeout,
                                   _preload_content=False)
        try:
            listing = json.loads(response.data)
        finally:
            response.release_conn()
        self._on_replace(list(listing.get("items") or []))
        self.synced.set()
        return str(listing["metadata"]["resourceVersion"])

    def _watch_from(self, resource_version: str) -> None:
        while not self._stopped.is_set():
            self._watch = watch.Watch()
            for event in self._watch.stream(
                self._list_call,
                resource_version=resource_version,
                timeout_seconds=self._watch_seconds,
                allow_watch_bookmarks=True,
                deserialize=False,
                _request_timeout=(self._request_timeout, self._watch_seconds + 30),
                **self._list_kwargs,
            ):
                kind, obj = event["type"], event["object"]
                resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                if kind != "BOOKMARK":
                    self._on_event(kind, obj)

    def _failed(self, err: Exception, backoff: float) -> None:
        log.warning("%s: cannot list or watch (%s); retrying in %.1fs", self.name, describe_error(err), backoff)
        if self._on_failure is not None:
            self._on_failure(err)
        self._stopped.wait(backoff)


def describe_error(err: Exception) -> str:
    """An API or transport error in one line, with the apiserver's own message when it sent one."""
    if isinstance(err, ApiException):
        try:
            message = json.loads(err.body or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"HTTP {err.status} {message or err.reason}"
    return f"{type(err).__name__}: {err}"
