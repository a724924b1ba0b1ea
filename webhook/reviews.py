"""AdmissionReview admission.k8s.io/v1: reading requests and building responses.

Two channels, as the apiserver sees them: a request we cannot read is the caller's
error (ReviewError -> HTTP 400 with a message); everything else is a normal 200 answer
whose `allowed` is always true, since this webhook only mutates.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson

from scheduler_core import fields

API_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class ReviewError(ValueError):
    """The body is not an AdmissionReview we can answer; the message says why."""


class AdmissionResponse(TypedDict, total=False):
    uid: str
    allowed: bool
    patch: str
    patchType: str
    auditAnnotations: dict[str, str]
    warnings: list[str]


class AdmissionReview(TypedDict):
    apiVersion: str
    kind: str
    response: AdmissionResponse


@dataclass(frozen=True)
class Request:
    """The parts of `request` this webhook reads."""

    uid: str
    operation: str
    group: str
    resource: str
    sub_resource: str
    namespace: str
    object: Mapping[str, Any] | None
    dry_run: bool

    @property
    def is_pod_create(self) -> bool:
        return (
            self.operation == "CREATE"
            and self.group == ""
            and self.resource == "pods"
            and not self.sub_resource
        )


def parse(body: object) -> Request:
    """Check the envelope and pull out the request; raises ReviewError naming the bad field."""
    if not fields.is_object(body):
        raise ReviewError(f"body: expected an AdmissionReview object, got {_kind(body)}")
    if body.get("apiVersion") != API_VERSION:
        raise ReviewError(f"apiVersion: expected {API_VERSION!r}, got {_show(body.get('apiVersion'))}")
    if body.get("kind") != "AdmissionReview":
        raise ReviewError(f"kind: expected 'AdmissionReview', got {_show(body.get('kind'))}")
    request = body.get("request")
    if not fields.is_object(request):
        raise ReviewError(f"request: expected an object, got {_kind(request)}")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError(f"request.uid: expected a non-empty string, got {_show(uid)}")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise ReviewError(f"request.operation: expected one of {', '.join(OPERATIONS)}, got {_show(operation)}")
    resource = request.get("resource")
    if not fields.is_object(resource) or not isinstance(resource.get("resource"), str):
        raise ReviewError(f"request.resource: expected {{group, version, resource}}, got {_show(resource)}")
    sub_resource = request.get("subResource") or ""
    namespace = request.get("namespace") or ""
    if not isinstance(sub_resource, str) or not isinstance(namespace, str):
        raise ReviewError("request.subResource and request.namespace: expected strings")
    obj = request.get("object")
    parsed = Request(
        uid=uid,
        operation=operation,
        group=str(resource.get("group") or ""),
        resource=resource["resource"],
        sub_resource=sub_resource,
        namespace=namespace,
        object=obj if fields.is_object(obj) else None,
        dry_run=request.get("dryRun") is True,
    )
    if parsed.is_pod_create:
        if not fields.is_object(obj):
            raise ReviewError(f"request.object: expected a Pod object, got {_kind(obj)}")
        if obj.get("kind", "Pod") != "Pod":
            raise ReviewError(f"request.object.kind: expected 'Pod', got {_show(obj.get('kind'))}")
        for part in ("metadata", "spec"):
            if not fields.is_object(obj.get(part, {})):
                raise ReviewError(f"request.object.{part}: expected an object, got {_kind(obj.get(part))}")
    return parsed


def response(
    uid: str,
    *,
    patch: list[dict[str, Any]] | None = None,
    audit: Mapping[str, str] | None = None,
    warnings: list[str] | None = None,
) -> AdmissionReview:
    """An allowing AdmissionReview; `patch` and `patchType` travel together or not at all."""
    answer: AdmissionResponse = {"uid": uid, "allowed": True}
    if patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(_compact(patch)).decode()
    if audit:
        answer["auditAnnotations"] = dict(audit)
    if warnings:
        answer["warnings"] = list(warnings)
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": answer}


def _compact(value: Any) -> bytes:
    """Compact JSON: orjson, or the standard library for the one thing orjson refuses, a lone surrogate in a string
    (a config's `set.annotations` may hold one; it is escaped as JSON allows)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":")).encode()


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


def _show(value: object) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."
