"""The Flask application: parse the AdmissionReview, call the pure decision, write the answer.

`create_app(holder, namespace_labels=..., claims=...)` is handed what it reads: the configuration
in force, a lookup of namespace labels and one of ResourceClaims and ResourceClaimTemplates (the
pod's DRA demand, webhook.resourceclaims). The process shell (gpu_scheduler.webhook_worker) builds
those in each gunicorn worker after fork, with their watches, and calls it; nothing here talks to
the API or happens at import time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from webhook import metrics, patches, reloading, reviews, rules

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 6 * 2**20  # an AdmissionReview of the largest pod etcd stores, with room

# A namespace's labels, or None when they cannot be known (rules with a namespaceSelector then do not match).
NamespaceLabels = Callable[[str], Mapping[str, str] | None]
# (kind, namespace, name) -> the device requests of that ResourceClaim or ResourceClaimTemplate, or why they are
# unknown (the pod's DRA demand is then unknown: rules with deviceClasses match it only by the classes known).
Claims = Callable[[str, str, str], rules.DeviceRequests | str]


def create_app(holder: reloading.ConfigHolder, *, namespace_labels: NamespaceLabels,
               claims: Claims | None = None) -> Flask:
    """`claims` None: no claim can be read (no cluster access), so DRA demand in claims is unknown."""
    app = Flask("gpu-scheduler-webhook")
    outcomes = {outcome: metrics.REQUESTS.labels(outcome) for outcome in metrics.OUTCOMES}

    @app.post("/mutate")
    def mutate() -> Any:
        started = time.perf_counter()
        try:
            body = orjson.loads(_body())
            review = reviews.parse(body)
        except BodyTooLarge:
            outcomes["invalid"].inc()
            return _error(400, f"body: larger than the {MAX_BODY_BYTES // 2**20} MiB limit")
        except (ValueError, RecursionError) as err:
            outcomes["invalid"].inc()
            message = str(err) if isinstance(err, reviews.ReviewError) else f"body: not valid JSON ({err})"
            return _error(400, message)
        answer, outcome = _answer(review, holder, namespace_labels, claims)
        outcomes[outcome].inc()
        encoded = orjson.dumps(answer)
        metrics.LATENCY.observe(time.perf_counter() - started)
        return Response(encoded, content_type="application/json")

    @app.get("/healthz")
    def healthz() -> Any:
        return jsonify(status="ok")

    @app.get("/readyz")
    def readyz() -> Any:
        if holder.current is None:
            return _error(503, "no valid configuration loaded yet")
        return jsonify(status="ready", schedulerName=holder.current.scheduler_name)

    @app.get("/metrics")
    def metrics_page() -> Response:
        return Response(metrics.exposition(), content_type=metrics.CONTENT_TYPE)

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Any:
        return _error(err.code or 500, err.description or err.name)

    return app


def _answer(
    review: reviews.Request,
    holder: reloading.ConfigHolder,
    namespace_labels: NamespaceLabels,
    claims: Claims | None = None,
) -> tuple[reviews.AdmissionReview, str]:
    """The AdmissionReview to send and the outcome to count. Never raises."""
    if not review.is_pod_create:
        return reviews.response(review.uid), "ignored"
    settings = holder.current
    if settings is None:
        warning = "gpu-scheduler: no valid config loaded; pod not mutated"
        return reviews.response(review.uid, warnings=[warning]), "no_config"
    try:
        assert review.object is not None
        labels = namespace_labels(review.namespace) if settings.admission.selects_namespaces else {}
        decision = patches.decide(review.object, namespace_labels=labels, settings=settings,
                                  claims=_in_namespace(claims, review.namespace))
    except Exception:  # a bug must not block pod creation: admit unmutated, loudly
        log.exception("failed to decide on pod %s/%s", review.namespace, _pod_name(review.object))
        return reviews.response(review.uid, warnings=["gpu-scheduler: internal error; pod not mutated"]), "error"
    warnings = []
    if decision.namespace_unknown:
        warnings.append("gpu-scheduler: namespace labels unavailable; namespaceSelector rules skipped")
    if decision.claims_unknown:
        more = len(decision.claims_unknown) - 1
        warnings.append(f"gpu-scheduler: DRA demand unknown: {decision.claims_unknown[0]}"
                        + (f" (and {more} more)" if more else "") + "; deviceClasses rules match only classes known")
    if decision.rule is not None:
        metrics.RULE_MATCHES.labels(decision.rule).inc()
    audit = {"rule": decision.rule} if decision.rule else None
    answer = reviews.response(review.uid, patch=decision.patch, audit=audit, warnings=warnings)
    return answer, "patched" if decision.patch else "unchanged"


def _in_namespace(claims: Claims | None, namespace: str) -> rules.ClaimLookup | None:
    if claims is None:
        return None
    return lambda kind, name: claims(kind, namespace, name)


class BodyTooLarge(Exception):
    """The request body is over MAX_BODY_BYTES."""


def _body() -> bytes:
    """The request body, read straight from the server's stream, refused past MAX_BODY_BYTES. Flask's
    MAX_CONTENT_LENGTH would do the same through a LimitedStream wrapper, which cost a tenth of a request's time."""
    length = request.content_length
    if length is not None and length > MAX_BODY_BYTES:
        raise BodyTooLarge()
    stream = request.environ["wsgi.input"]
    body = stream.read(length) if length is not None else stream.read(MAX_BODY_BYTES + 1)
    if len(body) > MAX_BODY_BYTES:
        raise BodyTooLarge()
    return bytes(body)


def _pod_name(pod: Any) -> str:
    metadata = (pod.get("metadata") or {}) if isinstance(pod, dict) else {}
    return str(metadata.get("name") or metadata.get("generateName") or "<unnamed>")


def _error(status: int, message: str) -> tuple[Response, int]:
    return jsonify(error=message, status=status), status
