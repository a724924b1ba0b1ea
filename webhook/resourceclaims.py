"""The device requests of the ResourceClaims and ResourceClaimTemplates a pod names, read at admission.

Rules on DRA demand (`admission.deviceClasses`, a rule's `deviceClasses`) need the DeviceClasses a pod's claims ask
for. `ClaimCache.get` reads a claim or template it has not read lately with one GET (through `fetch`, which the
process shell hands in: gpu_scheduler.webhook_worker) under a short timeout, and keeps its device requests for `ttl`
seconds. A claim's spec and a template's are immutable, so only a deletion and re-creation under the same name can
leave a kept answer stale, for at most `ttl`. No watch: the webhook reads only what the pods it admits name, and the
claims a cluster makes for its pods (many, and written at every allocation) never load it; a Job's pods share one
template, read once.

Nothing here raises into admission. A claim not found is not kept (it may be created next), and any failure is the
reason the pod's DRA demand is unknown, counted and logged. After a failure to reach the API at all (no HTTP answer,
a timeout) no GET is tried for `backoff` seconds, so an unreachable API costs one timeout, not one per pod.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from urllib.parse import quote

import orjson

from scheduler_core import fields
from webhook import metrics, rules

log = logging.getLogger(__name__)

API = "/apis/resource.k8s.io/v1"
PLURALS = {rules.CLAIM: "resourceclaims", rules.TEMPLATE: "resourceclaimtemplates"}
NOT_FOUND = 404

# (API path, timeout in seconds) -> the object's JSON; raises on failure, an HTTP error with its `status`.
Fetch = Callable[[str, float], bytes]


def api_path(kind: str, namespace: str, name: str) -> str:
    """The path of a ResourceClaim or ResourceClaimTemplate in the resource.k8s.io/v1 API."""
    return f"{API}/namespaces/{quote(namespace, safe='')}/{PLURALS[kind]}/{quote(name, safe='')}"


class ClaimCache:
    """`get(kind, namespace, name)` -> the device requests of that claim or template, or why they are unknown."""

    def __init__(self, fetch: Fetch, *, ttl: float = 30.0, timeout: float = 1.0, backoff: float = 5.0,
                 max_entries: int = 4096, clock: Callable[[], float] = time.monotonic):
        self._fetch = fetch
        self._ttl = ttl
        self._timeout = timeout
        self._backoff = backoff
        self._max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()  # gunicorn's threads share a worker's cache
        self._entries: collections.OrderedDict[tuple[str, str, str], tuple[float, rules.DeviceRequests]] = (
            collections.OrderedDict())
        self._unreachable: tuple[float, str] | None = None  # until when no GET is tried, and why

    def get(self, kind: str, namespace: str, name: str) -> rules.DeviceRequests | str:
        key = (kind, namespace, name)
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry[0] > now:
                self._entries.move_to_end(key)
                return entry[1]
            unreachable = self._unreachable if self._unreachable is not None and self._unreachable[0] > now else None
        if unreachable is not None:
            metrics.CLAIM_LOOKUP_FAILURES.labels("error").inc()
            return unreachable[1]
        try:
            body = self._fetch(api_path(kind, namespace, name), self._timeout)
        except Exception as err:  # whatever it is, the pod is admitted: its DRA demand is unknown
            return self._failed(kind, namespace, name, err, now)
        try:
            requests = rules.device_requests(kind, fields.mapping(orjson.loads(body)))
        except Exception as err:  # not JSON, or a bug: the same, without blaming the API's reachability
            log.exception("%s %s/%s: the API's answer cannot be read", kind, namespace, name)
            metrics.CLAIM_LOOKUP_FAILURES.labels("error").inc()
            return f"cannot be read: {type(err).__name__}"
        with self._lock:
            self._entries[key] = (now + self._ttl, requests)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return requests

    def _failed(self, kind: str, namespace: str, name: str, err: Exception, now: float) -> str:
        status = getattr(err, "status", None)
        if status == NOT_FOUND:
            metrics.CLAIM_LOOKUP_FAILURES.labels("not_found").inc()
            return "not found"
        metrics.CLAIM_LOOKUP_FAILURES.labels("error").inc()
        if isinstance(status, int):
            why = f"cannot be read: HTTP {status} {getattr(err, 'reason', '') or ''}".rstrip()
        else:
            why = f"cannot be read: {type(err).__name__}: {fields.cut(str(err))}"
            with self._lock:  # no HTTP answer: the API is not reached; do not wait on it for every pod
                self._unreachable = (now + self._backoff, f"{why} (no new try for {self._backoff:g} s)")
        log.warning("%s %s/%s: %s; rules with deviceClasses match the pod only by the classes known",
                    kind, namespace, name, why)
        return why
