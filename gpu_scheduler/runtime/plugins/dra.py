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

Extended resources DRA serves (a pod asking `nvidia.com/gpu` placed on a node whose devices a DeviceClass naming it
gives): PreBind creates the pod's claim (owned by the pod, annotated `resource.kubernetes.io/extended-resource-claim`,
named `<pod>-extended-resources-<random>`, with the finalizer), writes its allocation and reservation as above, and
records in the pod's `status.extendedResourceClaimStatus` which request serves which container (what the kubelet
reads). Unreserve deletes that claim. A claim left by an attempt that did not bind (a crash between its writes)
keeps the pod out (PreEnqueue) until it is deleted, which this plugin does, as upstream's PostFilter does.
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
from scheduler_core.dra import extended
from scheduler_core.dra import state as dra_state

log = logging.getLogger(__name__)

BINDING_TIMEOUT = dra_state.BINDING_TIMEOUT  # seconds a pod waits for its devices' binding conditions
RETRIES = 5  # writes of one claim that may meet a conflict (client-go's retry.DefaultRetry)
DELETIONS_KEPT = 10_000  # stale claims whose deletion was asked, remembered so it is asked once


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
        self._deleting: set[str] = set()  # uids of stale extended-resource claims whose deletion was asked

    def watches(self, put: Callable[[tuple[Any, ...]], None]) -> list[watching.Reflector]:
        """ResourceSlices, DeviceClasses and ResourceClaims, into the model."""
        return watching.resource_watches(
            client.ResourceV1Api(self.handle.api), lambda kind, items: put(("resources", kind, items)),
            lambda kind, event, obj: put(("resource", kind, event, obj)))

    def pre_enqueue(self, pending: watched.PendingPod) -> str | None:
        """Upstream's PreEnqueue: a pod whose claims are not made yet (or missing, being deleted, another pod's)
        waits, told why; the update that names its claim, or the claim's event, brings it back at once."""
        resources = self.handle.model.cluster.dra
        if not resources.ready:
            return None
        stale = resources.extended_claims.get((pending.namespace, pending.uid)) if pending.facts.extended_asks else None
        if stale is not None:
            return self._delete_stale(pending, stale)
        if not pending.facts.resource_claims:
            return None
        return resources.pre_enqueue(pending.namespace, pending.name, pending.uid, pending.facts.resource_claims)

    def _delete_stale(self, pending: watched.PendingPod, key: tuple[str, str]) -> str:
        """A pending pod's extended-resource claim is left from an attempt that did not bind (upstream's Filter
        refuses the pod on every node, then its PostFilter deletes the claim): delete it; its deletion brings the
        pod back."""
        record = self.handle.model.cluster.dra.claims[key]
        uid = str(fields.mapping(record.obj.get("metadata")).get("uid") or "")
        if not record.deleting and uid not in self._deleting:
            if len(self._deleting) >= DELETIONS_KEPT:
                self._deleting.clear()
            self._deleting.add(uid)
            self.handle.submit_report(_delete_claim, self.handle.api, key, uid)
        return (f"deleting ResourceClaim {key[0]}/{key[1]}, made for the pod's extended resources by an attempt "
                "that did not bind it")

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
        for key, allocation in cycle.decision.held_claims(pending.facts):
            resources.assume(key, allocation)
        made = cycle.decision.extended_claim
        if claim_writes or made is not None:
            cycle.state[self.name] = {"writes": claim_writes, "reserved": [], "extended": made, "created": None}

    def unreserve(self, cycle: BindingCycle) -> None:
        resources = self.handle.model.cluster.dra
        for key, _ in cycle.decision.held_claims(cycle.pending.facts):
            resources.forget(key)
        state = cycle.state.get(self.name)
        for namespace, name in state["reserved"] if state else ():
            self.handle.submit_report(_unreserve, self.handle.api, namespace, name, cycle.uid)
        if state and state["created"] is not None:  # the claim made for the pod: nobody else would delete it
            key, uid = state["created"]
            self.handle.submit_report(_delete_claim, self.handle.api, key, uid)

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
        keys = [w.key for w in state["writes"]]
        if state["extended"] is not None:
            keys.append(self._bind_extended(cycle, state, consumer))
            conditions |= _has_binding_conditions(state["extended"][1])
        if not conditions:
            return None
        return Wait(lambda: self._conditions_met(keys), time.monotonic() + self.binding_timeout,
                    f'running PreBind plugin "{self.name}": binding timeout: the devices\' binding conditions were '
                    f"not met within {self.binding_timeout:.0f} s")

    def _bind_extended(self, cycle: BindingCycle, state: dict[str, Any], consumer: Mapping[str, str]
                       ) -> tuple[str, str]:
        """Upstream's bindClaim for the pod's extended resources: create the claim (with the finalizer), record its
        allocation and reservation, then the pod's `status.extendedResourceClaimStatus`."""
        pending = cycle.pending
        node_claim, allocation = state["extended"]
        body = extended.claim_for(pending.namespace, pending.name, pending.uid, list(node_claim.requests))
        body["metadata"]["finalizers"] = [dra_state.FINALIZER]
        path = f"/apis/resource.k8s.io/v1/namespaces/{quote(pending.namespace)}/resourceclaims"
        try:
            created = json.loads(rawapi.request(self.handle.api, "POST", path, body))
        except ApiException as err:
            raise ApiException(status=err.status, reason=f'running PreBind plugin "{self.name}": create claim for '
                                                         f"extended resources: {watching.describe_error(err)}") from err
        meta = created["metadata"]
        key = (pending.namespace, str(meta["name"]))
        state["created"] = (key, str(meta.get("uid") or ""))
        claim_write = ClaimWrite(key, created, allocation)
        try:
            _bind_claim(self.handle.api, claim_write, consumer)
            writes.patch_status(self.handle.api, pending.namespace, pending.name, {
                "metadata": {"uid": pending.uid},
                "status": {"extendedResourceClaimStatus": {"requestMappings": [dict(m) for m in node_claim.mappings],
                                                           "resourceClaimName": key[1]}}})
        except ApiException as err:
            raise ApiException(status=err.status, reason=f'running PreBind plugin "{self.name}": '
                                                         f"{_describe(claim_write, err)}") from err
        return key

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


def _delete_claim(api: Any, key: tuple[str, str], uid: str) -> None:
    """Delete a claim the scheduler made for a pod (upstream's deleteClaim): our finalizer off first, then the
    claim, both only while it is still the claim of that uid."""
    path = _claim_path(*key)
    try:
        for attempt in range(RETRIES):
            claim = json.loads(rawapi.request(api, "GET", path, None))
            meta = claim.get("metadata") or {}
            if meta.get("uid") != uid:
                return
            finalizers = meta.get("finalizers") or []
            if dra_state.FINALIZER not in finalizers:
                break
            meta["finalizers"] = [f for f in finalizers if f != dra_state.FINALIZER]
            try:
                rawapi.request(api, "PUT", path, claim)
                break
            except ApiException as err:
                if err.status != 409 or attempt == RETRIES - 1:
                    raise
        rawapi.request(api, "DELETE", path, {"preconditions": {"uid": uid}})
    except (ApiException, OSError) as err:
        if getattr(err, "status", None) != 404:  # gone already: done
            log.warning("claim %s/%s, made for a pod whose binding failed, could not be deleted: %s", *key,
                        watching.describe_error(err))


def _describe(claim_write: ClaimWrite, err: ApiException) -> str:
    namespace, name = claim_write.key
    what = "add allocation and reservation to" if claim_write.allocation is not None else "add reservation to"
    return f"{what} claim {namespace}/{name}: {watching.describe_error(err)}"
