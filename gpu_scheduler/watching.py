"""List-then-watch of one kind of object, in the manner of client-go's reflector.

An informer needs more than a watch: an initial list whose items replace the cache, a watch
from the list's resourceVersion, and a way back to a correct cache after anything goes wrong,
without a restart. The watch stream is read here line by line rather than through the
client's `Watch`, whose ERROR handling breaks on the raw dicts this module asks for
(`KeyError: 'raw_object'` with `deserialize=False`). Objects are handed over as the API's
JSON (dicts): the pure core reads that shape, and skipping the client's model classes keeps a
busy pod watch cheap.

What each failure leads to (nothing ends the thread but `stop()`):

    the watch ends normally (timeoutSeconds ran out)     -> watch again from the last resourceVersion
    ERROR event 410 Expired/Gone, HTTP 410 on the watch  -> list again at once
    any other ERROR event (a Status)                     -> list again after backoff
    an API or transport error from the list or the watch,
      a line that is not a JSON watch event              -> list again after backoff
    on_replace raises                                    -> logged; list again after backoff
    on_event raises                                      -> logged with the object's kind/namespace/name;
                                                            the event is skipped, the watch goes on
    anything else                                        -> logged with traceback; list again after backoff

Backoff doubles from 0.2 s up to `max_backoff` and starts over after a list that the consumer
accepted. `down_for()` says how long the watch has not been established, for health checks.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from urllib3.exceptions import HTTPError

log = logging.getLogger(__name__)

GONE = 410
NOT_FOUND = 404
ABSENT_RETRY = 30.0  # seconds between lists of an optional kind the API does not serve
INITIAL_BACKOFF = 0.2

FAILURES = Counter(
    "gpu_scheduler_watch_failures_total",
    "List/watch failures by watch and reason: expired (410, listed again at once), error (listed again "
    "after backoff), callback (on_event raised; the event was skipped).",
    ["watch", "reason"],
)


class Expired(Exception):
    """The watch's resourceVersion is gone from the API's history (410): only a new list can go on."""


class WatchError(Exception):
    """The watch stream reported an error, or sent something that is not a watch event."""


class Reflector:
    """Keeps a consumer in step with the API: `on_replace(items)` after each list, `on_event(type, obj)` after.

    Callbacks run on the reflector's own thread and receive plain dicts. The cache is in step
    once `synced` is set and while `down_for()` is None; a health endpoint answers with
    `all(r.healthy(max_down) for r in reflectors)`, so a watch that cannot come back shows.
    """

    def __init__(
        self,
        list_call: Callable[..., Any],
        *,
        name: str,
        on_replace: Callable[[list[Any]], None],
        on_event: Callable[[str, Any], None],
        list_kwargs: dict[str, Any] | None = None,
        watch_seconds: int = 240,
        request_timeout: float = 10.0,
        max_backoff: float = 10.0,
        optional: bool = False,
    ):
        self.name = name
        self._list_call = list_call
        self._list_kwargs = list_kwargs or {}
        self._on_replace = on_replace
        self._on_event = on_event
        self._watch_seconds = watch_seconds
        self._request_timeout = request_timeout
        self._max_backoff = max_backoff
        self.optional = optional  # a kind that may not be served (a CRD not installed): 404 is an empty list
        self.absent = False  # the kind was not served at the last list
        self._stopped = threading.Event()
        self._response: Any = None  # the open watch response, shut down by stop()
        self._down_since: float | None = time.monotonic()
        self.synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"reflector-{name}", daemon=True)

    def start(self) -> Reflector:
        self._down_since = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        response = self._response
        if response is not None:
            try:
                response.shutdown()  # unblocks the thread's read; closing could wait for it instead
            except (ValueError, RuntimeError, OSError):
                pass  # the thread closed it meanwhile

    # --- health ------------------------------------------------------------------------------

    def down_for(self) -> float | None:
        """Seconds since the watch stopped being established (or since `start()` before the first
        one was), None while it is established. A short gap while the watch reconnects after its
        normal timeout does not count: only a failure starts the clock."""
        down_since = self._down_since
        return None if down_since is None else time.monotonic() - down_since

    def healthy(self, max_down: float = 60.0) -> bool:
        """False once the watch has been down longer than `max_down` seconds: the consumer's cache
        may be stale by then, and a health check should say so rather than serve a frozen model.
        A connection that dies without a FIN or RST is noticed only at the read timeout, up to
        `watch_seconds` + 30 s later."""
        down = self.down_for()
        return down is None or down <= max_down

    def _went_down(self) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()

    # --- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        backoff = INITIAL_BACKOFF
        while not self._stopped.is_set():
            try:
                resource_version = self._list()
                backoff = INITIAL_BACKOFF
                self._watch_from(resource_version)  # returns only once stopped
            except Exception as err:  # the unforeseen too: a dead thread would leave the cache frozen
                self._went_down()
                if self._stopped.is_set():
                    return
                if isinstance(err, Expired):
                    FAILURES.labels(self.name, "expired").inc()
                    log.info("%s: watch expired (%s); listing again", self.name, err)
                    continue
                FAILURES.labels(self.name, "error").inc()
                if isinstance(err, (ApiException, HTTPError, OSError, ValueError, WatchError)):
                    log.warning("%s: cannot list or watch (%s); listing again in %.1fs",
                                self.name, describe_error(err), backoff)
                else:
                    log.exception("%s: unexpected failure; listing again in %.1fs", self.name, backoff)
                self._stopped.wait(backoff)
                backoff = min(backoff * 2, self._max_backoff)

    def _list(self) -> str:
        try:
            response = self._list_call(**self._list_kwargs, _request_timeout=self._request_timeout,
                                       _preload_content=False)
        except ApiException as err:
            if not (self.optional and err.status == NOT_FOUND):
                raise
            return self._not_served()
        self.absent = False
        try:
            listing = json.loads(response.data)
        finally:
            response.release_conn()
        resource_version = str(listing["metadata"]["resourceVersion"])
        self._on_replace(list(listing.get("items") or []))
        self.synced.set()
        return resource_version

    def _not_served(self) -> str:
        """An optional kind the API does not serve (its CRD is not installed): no objects, and a fresh list every
        ABSENT_RETRY seconds, until it is served or the reflector is stopped. Healthy meanwhile."""
        if not self.absent:
            log.info("%s: not served by the API (is its CRD installed?); none assumed, looking again every %.0fs",
                     self.name, ABSENT_RETRY)
            self._on_replace([])
        self.absent = True
        self._down_since = None
        self.synced.set()
        while not self._stopped.wait(ABSENT_RETRY):
            try:
                response = self._list_call(**self._list_kwargs, _request_timeout=self._request_timeout,
                                           _preload_content=False)
            except ApiException as err:
                if err.status == NOT_FOUND:
                    continue
                raise
            response.data  # read out, so the connection goes back to the pool clean
            response.release_conn()
            log.info("%s: now served by the API; listing", self.name)
            return self._list()
        raise WatchError("stopped")

    def _watch_from(self, resource_version: str) -> None:
        """Watch until stopped; each normal end of a watch request is followed by the next one."""
        while not self._stopped.is_set():
            for kind, obj in self._events(resource_version):
                resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                if kind != "BOOKMARK":
                    self._deliver(kind, obj)

    def _events(self, resource_version: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """One watch request: its events, until the server ends it; an ERROR event raises."""
        try:
            response = self._list_call(
                **self._list_kwargs,
                watch=True,
                resource_version=resource_version,
                timeout_seconds=self._watch_seconds,
                allow_watch_bookmarks=True,
                _request_timeout=(self._request_timeout, self._watch_seconds + 30),
                _preload_content=False,
            )
        except ApiException as err:
            if err.status == GONE:
                raise Expired(describe_error(err)) from err
            raise
        self._response = response
        self._down_since = None
        try:
            for line in response:
                if line.strip():
                    yield parse_event(line)
        finally:
            self._response = None
            response.close()  # a connection left mid-stream must not go back to the pool for reuse
            response.release_conn()

    def _deliver(self, kind: str, obj: dict[str, Any]) -> None:
        """A failing callback loses this one event, not the watch (client-go logs and goes on too)."""
        try:
            self._on_event(kind, obj)
        except Exception:
            FAILURES.labels(self.name, "callback").inc()
            log.exception("%s: on_event failed for %s %s; event skipped", self.name, kind, describe_object(obj))


MAX_DOWN_SECONDS = 60.0  # a watch down longer than this fails the health checks that ask


def down(reflectors: Iterable[Reflector], max_down: float = MAX_DOWN_SECONDS) -> list[str]:
    """`Pods: watch down for 75 s` for each reflector down longer than `max_down`; empty when all are well.

    A process whose model has been frozen this long should say so: the kubelet then restarts it,
    and a restart relists.
    """
    return [f"{r.name}: watch down for {r.down_for() or 0:.0f} s" for r in reflectors if not r.healthy(max_down)]


class ClusterWatches:
    """The Node, Pod and Namespace watches both scheduler modes keep their model by (pods that still hold
    resources; namespaces for the labels that pod affinity's namespaceSelector reads), and for `run` the Service,
    ReplicationController, ReplicaSet and StatefulSet watches (their selectors, for system default spreading; the
    extender leaves spreading to kube-scheduler), and the storage watches (claims, volumes, classes, CSI objects;
    the extender leaves volumes to kube-scheduler too).

    Deciding waits for the reflectors named in `waits_for` (all by default; Nodes and Pods from `of_cluster`):
    until the Namespaces have listed, the model itself holds back only the pods whose terms read namespace
    labels, and until the selectors' kinds have, it spreads no pod by default. Every watch counts for health."""

    def __init__(self, reflectors: list[Reflector], *, waits_for: frozenset[str] | None = None):
        self.reflectors = reflectors
        self.waits_for = waits_for

    @classmethod
    def of_cluster(cls, core: Any, *, on_nodes: Callable[[list[Any]], None], on_node: Callable[[str, Any], None],
                   on_pods: Callable[[list[Any]], None], on_pod: Callable[[str, Any], None],
                   on_namespaces: Callable[[list[Any]], None], on_namespace: Callable[[str, Any], None],
                   apps: Any = None, on_selectors: Callable[[str, list[Any]], None] | None = None,
                   on_selector: Callable[[str, str, Any], None] | None = None,
                   extra: Iterable[Reflector] = ()) -> ClusterWatches:
        """Given `apps` (an AppsV1Api) and the selector callbacks, which take the object's kind first, the
        selector watches too; then the `extra` ones a capability needs (storage_watches, budget_watch,
        group_watches)."""
        reflectors = [
            Reflector(core.list_node, name="Nodes", on_replace=on_nodes, on_event=on_node),
            Reflector(core.list_pod_for_all_namespaces, name="Pods",
                      list_kwargs={"field_selector": "status.phase!=Succeeded,status.phase!=Failed"},
                      on_replace=on_pods, on_event=on_pod),
            Reflector(core.list_namespace, name="Namespaces", on_replace=on_namespaces, on_event=on_namespace),
        ]
        if apps is not None and on_selectors is not None and on_selector is not None:
            reflectors += _of_kinds(on_selectors, on_selector, (
                ("Service", core.list_service_for_all_namespaces),
                ("ReplicationController", core.list_replication_controller_for_all_namespaces),
                ("ReplicaSet", apps.list_replica_set_for_all_namespaces),
                ("StatefulSet", apps.list_stateful_set_for_all_namespaces)))
        return cls([*reflectors, *extra], waits_for=frozenset({"Nodes", "Pods"}))

    def start(self) -> ClusterWatches:
        for reflector in self.reflectors:
            reflector.start()
        return self

    def stop(self) -> None:
        for reflector in self.reflectors:
            reflector.stop()

    @property
    def synced(self) -> bool:
        """Every watch decisions wait for has listed once: decisions before that would miss what the API holds."""
        return all(reflector.synced.is_set() for reflector in self.reflectors
                   if self.waits_for is None or reflector.name in self.waits_for)

    def down(self, max_down: float = MAX_DOWN_SECONDS) -> list[str]:
        return down(self.reflectors, max_down)


def storage_watches(core: Any, storage: Any, on_list: Callable[[str, list[Any]], None],
                    on_event: Callable[[str, str, Any], None]) -> list[Reflector]:
    """The objects the volume plugins read (scheduler_core.volumes.KINDS), with callbacks that take the kind first;
    `core` a CoreV1Api, `storage` a StorageV1Api."""
    return _of_kinds(on_list, on_event, (
        ("PersistentVolumeClaim", core.list_persistent_volume_claim_for_all_namespaces),
        ("PersistentVolume", core.list_persistent_volume),
        ("StorageClass", storage.list_storage_class),
        ("CSINode", storage.list_csi_node),
        ("CSIDriver", storage.list_csi_driver),
        ("CSIStorageCapacity", storage.list_csi_storage_capacity_for_all_namespaces),
        ("VolumeAttachment", storage.list_volume_attachment)))


def resource_watches(resource: Any, on_list: Callable[[str, list[Any]], None],
                     on_event: Callable[[str, str, Any], None]) -> list[Reflector]:
    """The DRA objects the allocator reads (scheduler_core.dra.state.KINDS), with callbacks that take the kind
    first; `resource` a ResourceV1Api (resource.k8s.io/v1). Optional: an apiserver older than v1.34 does not serve
    resource.k8s.io/v1, and has no claims to allocate then."""
    return _of_kinds(on_list, on_event, (
        ("ResourceSlice", resource.list_resource_slice),
        ("DeviceClass", resource.list_device_class),
        ("ResourceClaim", resource.list_resource_claim_for_all_namespaces)), optional=True)


def budget_watch(policy: Any, on_list: Callable[[list[Any]], None], on_event: Callable[[str, Any], None]) -> Reflector:
    """The PodDisruptionBudgets preemption reads; `policy` a PolicyV1Api."""
    return Reflector(policy.list_pod_disruption_budget_for_all_namespaces, name="PodDisruptionBudgets",
                     on_replace=on_list, on_event=on_event)


def group_watches(custom: Any, apis: Iterable[str], on_list: Callable[[str, list[Any]], None],
                  on_event: Callable[[str, str, Any], None]) -> list[Reflector]:
    """The PodGroups of each of `apis` (`group/version`), where served (optional: a CRD not installed is no
    failure), with callbacks that take the API first; `custom` a CustomObjectsApi."""
    reflectors = []
    for api in apis:
        group, _, version = api.partition("/")
        reflectors.append(Reflector(
            functools.partial(custom.list_cluster_custom_object, group, version, "podgroups"),
            name=f"PodGroups {api}", on_replace=functools.partial(on_list, api),
            on_event=functools.partial(on_event, api), optional=True))
    return reflectors


def _of_kinds(on_list: Callable[[str, list[Any]], None], on_event: Callable[[str, str, Any], None],
              kinds: Iterable[tuple[str, Callable[..., Any]]], *, optional: bool = False) -> list[Reflector]:
    """A reflector per (kind, list call), named `<kind>s`, whose callbacks take the kind first."""
    return [Reflector(list_call, name=f"{kind}s", on_replace=functools.partial(on_list, kind),
                      on_event=functools.partial(on_event, kind), optional=optional) for kind, list_call in kinds]


def _loads(text: bytes | str) -> Any:
    """JSON, by orjson (several times faster than json: every pod update passes here), or by json for what
    orjson refuses and json reads (integers past 64 bits)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def parse_event(line: bytes | str) -> tuple[str, dict[str, Any]]:
    """(type, object) of one watch line; raises Expired or WatchError for an ERROR event, WatchError
    for anything that is not an event."""
    try:
        event = _loads(line)
    except ValueError as err:
        raise WatchError(f"not a JSON watch event: {line[:200]!r}") from err
    kind = event.get("type") if isinstance(event, dict) else None
    obj = event.get("object") if isinstance(event, dict) else None
    if not isinstance(kind, str) or not isinstance(obj, dict):
        raise WatchError(f"not a watch event: {line[:200]!r}")
    if kind == "ERROR":
        status = f"ERROR event {obj.get('code')} {obj.get('reason')}: {obj.get('message')}"
        if obj.get("code") == GONE or obj.get("reason") in ("Expired", "Gone"):
            raise Expired(status)
        raise WatchError(status)
    return kind, obj


def describe_object(obj: Any) -> str:
    """`Kind namespace/name` of an API object, as far as it has them."""
    if not isinstance(obj, dict):
        return f"a {type(obj).__name__}"
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        metadata = {}
    name = "/".join(str(part) for part in (metadata.get("namespace"), metadata.get("name")) if part)
    return f"{obj.get('kind') or 'object'} {name or '(unnamed)'}"


def describe_error(err: Exception) -> str:
    """An API or transport error in one line, with the apiserver's own message when it sent one."""
    if isinstance(err, ApiException):
        try:
            message = json.loads(err.body or "{}").get("message")
        except (ValueError, AttributeError):
            message = None
        return f"HTTP {err.status} {message or err.reason}"
    return f"{type(err).__name__}: {err}"


class DownCollector(Collector):
    """`gpu_scheduler_watch_down_seconds`: how long each watch of `read()` (None: none yet) has been down, 0 while
    it is established, read at scrape: what an alert on a frozen model watches."""

    def __init__(self, read: Callable[[], ClusterWatches | None]):
        self._read = read

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily("gpu_scheduler_watch_down_seconds",
                                   "Seconds each list/watch has been down (0 while established), by watch.",
                                   labels=["watch"])
        watches = self._read()
        for reflector in watches.reflectors if watches is not None else ():
            family.add_metric([reflector.name], reflector.down_for() or 0.0)
        yield family
