"""DRA claims at bind time, as kube-scheduler's DynamicResources Reserve, PreBind and Unreserve have them (v1.36.3).

The decision (scheduler_core.dra, run by the core's DynamicResources filter) allocated devices for each claim of
the pod that had none. Reserve assumes those allocations in the model, so the next decision does not give the
same devices away. PreBind writes every claim the pod uses but is not yet reserved for: the finalizer
`resource.kubernetes.io/delete-protection` (an update of the claim), then `status.allocation` with its
`allocationTimestamp` and the pod appended to `status.reservedFor` (an update of the status; a conflict reads the
claim again and retries, as upstream's RetryOnConflict). Devices with binding conditions make PreBind wait, without
holding a thread, until the driver reports them met (or a failure condition, or 600 s). Unreserve drops the
assumptions and takes the pod out of `reservedFor` of the claims it reserved; the claim's allocation stays, and
kube-controller-manager's resourceclaim controller deallocates a claim no pod reserves, as upstream leaves it.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_scheduler import rawapi, watching
from gpu_scheduler.runtime import writes
from gpu_scheduler.runtime.framework import BindingCycle, Handle, Plugin, Wait
from scheduler_core import fields, watched
from scheduler_core.dra import state as dra_state

log = logging.getLogger(__name__)

BINDING_TIMEOUT = dra_state.BINDING_TIMEOUT  # seconds a pod waits for its devices' binding conditions
RETRIES = 5  # writes of one claim that may meet a conflict (client-go's retry.DefaultRetry)


@dataclass(frozen=True)
class ClaimWrite:
    """One claim PreBind writes: the object as the model had it at Reserve, and the allocation to record (None
    for a claim already allocated, which is only reserved)."""

    key: tuple[str, str]
    obj: Mapping[str, Any]
    allocation: Mapping[str, Any] | None


class DynamicResources(Plugin):
    name = "DynamicResources"
    reports_waiting = True

    def __init__(self, handle: Handle, *, binding_timeout: float = BINDING_TIMEOUT):
        super().__init__(handle)
        self.binding_timeout = binding_timeout

    def watches(self, put: Callable[[tuple[Any, ...]], None]) -> list[watching.Reflector]:
        """ResourceSlices, DeviceClasses and ResourceClaims, into the model."""
        return watching.resource_watches(
            client.ResourceV1Api(self.handle.api), lambda kind, items: put(("resources", kind, items)),
            lambda kind, event, obj: put(("resource", kind, event, obj)))

    def pre_enqueue(self, pending: watched.PendingPod) -> str | None:
        """Upstream's PreEnqueue: a pod whose claims are not made yet (or missing, being deleted, another pod's)
        waits, told why; the update that names its claim, or the claim's event, brings it back at once."""
        resources = self.handle.model.cluster.dra
        if not pending.facts.resource_claims or not resources.ready:
            return None
        return resources.pre_enqueue(pending.namespace, pending.name, pending.uid, pending.facts.resource_claims)

    def reserve(self, cycle: BindingCycle) -> None:
        pending, resources = cycle.pending, self.handle.model.cluster.dra
        allocations = dict(cycle.decision.claim_allocations)
        claim_writes = []
        for entry in pending.facts.resource_claims:
            if entry.claim_name is None:
                continue
            key = (pending.namespace, entry.claim_name)
            record = resources.claims.get(key)
            if record is None or pending.uid in record.reserved_for:
                continue
            claim_writes.append(ClaimWrite(key, record.obj, allocations.get(key)))  # copied before it is written
        for key, allocation in allocations.items():
            resources.assume(key, allocation)
        if claim_writes:
            cycle.state[self.name] = {"writes": claim_writes, "reserved": []}

    def unreserve(self, cycle: BindingCycle) -> None:
        resources = self.handle.model.cluster.dra
        for key, _ in cycle.decision.claim_allocations:
            resources.forget(key)
        state = cycle.state.get(self.name)
        for namespace, name in state["reserved"] if state else ():
            self.handle.submit_report(_unreserve, self.handle.api, namespace, name, cycle.uid)

    def pre_bind(self, cycle: BindingCycle) -> Wait | None:
        state = cycle.state.get(self.name)
        if not state:
            return None
        consumer = dra_state.consumer(cycle.pending.name, cycle.uid)
        conditions = False
        for claim_write in state["writes"]:
            try:
                _bind_claim(self.handle.api, claim_write, consumer)
            except ApiException as err:
                raise ApiException(status=err.status, reason=f'running PreBind plugin "{self.name}": '
                                                             f"{_describe(claim_write, err)}") from err
            state["reserved"].append(claim_write.key)
            conditions |= _has_binding_conditions(claim_write.allocation)
        if not conditions:
            return None
        keys = [w.key for w in state["writes"]]
        return Wait(lambda: self._conditions_met(keys), time.monotonic() + self.binding_timeout,
                    f'running PreBind plugin "{self.name}": binding timeout: the devices\' binding conditions were '
                    f"not met within {self.binding_timeout:.0f} s")

    def _conditions_met(self, keys: list[tuple[str, str]]) -> bool | str:
        """On the loop thread: every device's binding conditions true (True), not yet (False), or one failed."""
        resources = self.handle.model.cluster.dra
        for key in keys:
            record = resources.claims.get(key)
            if record is None:
                return f'running PreBind plugin "{self.name}": claim {key[0]}/{key[1]} was deleted'
            verdict = dra_state.binding_conditions(record.obj)
            if verdict is not True:
                return verdict if isinstance(verdict, str) else False
        return True


def _has_binding_conditions(allocation: Mapping[str, Any] | None) -> bool:
    results = fields.sequence(fields.mapping(fields.mapping(allocation).get("devices")).get("results"))
    return any(fields.mapping(r).get("bindingConditions") for r in results)


def _claim_path(namespace: str, name: str) -> str:
    return f"/apis/resource.k8s.io/v1/namespaces/{quote(namespace)}/resourceclaims/{quote(name)}"


def _bind_claim(api: Any, claim_write: ClaimWrite, consumer: Mapping[str, str]) -> None:
    """Upstream's bindClaim: finalizer, allocation and reservation, retried on conflict with the claim read again."""
    namespace, name = claim_write.key
    path = _claim_path(namespace, name)
    claim: dict[str, Any] = copy.deepcopy(dict(claim_write.obj))
    for attempt in range(RETRIES):
        if attempt:
            claim = json.loads(rawapi.request(api, "GET", path, None))
        try:
            _write_claim(api, path, claim, claim_write.allocation, consumer)
            return
        except ApiException as err:
            if err.status != 409 or attempt == RETRIES - 1:
                raise


def _write_claim(api: Any, path: str, claim: dict[str, Any], allocation: Mapping[str, Any] | None,
                 consumer: Mapping[str, str]) -> None:
    meta = claim.setdefault("metadata", {})
    status = claim.setdefault("status", {})
    key = f"{meta.get('namespace')}/{meta.get('name')}"
    if meta.get("deletionTimestamp"):
        raise ApiException(status=410, reason=f"claim {key} got deleted in the meantime")
    if allocation is not None:
        if status.get("allocation"):
            raise ApiException(status=410, reason=f"claim {key} got allocated elsewhere in the meantime")
        finalizers = meta.setdefault("finalizers", [])
        if dra_state.FINALIZER not in finalizers:
            finalizers.append(dra_state.FINALIZER)
            claim.update(json.loads(rawapi.request(api, "PUT", path, claim)))
            meta, status = claim["metadata"], claim.setdefault("status", {})
        status["allocation"] = copy.deepcopy(dict(allocation))
    if not status.get("allocation"):
        raise ApiException(status=410, reason=f"claim {key} got deallocated elsewhere in the meantime")
    status["allocation"].setdefault("allocationTimestamp", writes.timestamp())
    status["reservedFor"] = [*(status.get("reservedFor") or []), dict(consumer)]
    rawapi.request(api, "PUT", f"{path}/status", claim)


def _unreserve(api: Any, namespace: str, name: str, uid: str) -> None:
    """Take the pod out of the claim's reservedFor (upstream's Unreserve patch; the UID guards a re-created claim)."""
    body = {"status": {"reservedFor": [{"$patch": "delete", "uid": uid}]}}
    try:
        rawapi.request(api, "PATCH", f"{_claim_path(namespace, name)}/status", body,
                       content_type=rawapi.STRATEGIC_MERGE_PATCH)
    except (ApiException, OSError) as err:
        log.warning("claim %s/%s stays reserved for pod %s, whose binding failed: %s", namespace, name, uid,
                    watching.describe_error(err))


def _describe(claim_write: ClaimWrite, err: ApiException) -> str:
    namespace, name = claim_write.key
    what = "add allocation and reservation to" if claim_write.allocation is not None else "add reservation to"
    return f"{what} claim {namespace}/{name}: {watching.describe_error(err)}"
