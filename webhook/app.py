"""The Flask application: parse the AdmissionReview, call the pure decision, write the answer.

Built by `create_app(settings)` in each gunicorn worker after fork, so every worker runs
its own config and namespace watches; nothing happens at import time.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from webhook import metrics, namespaces, patches, reviews, sources

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 6 * 2**20  # an AdmissionReview of the largest pod etcd stores, with room


@dataclass(frozen=True)
class Settings:
    """What a webhook worker needs; built by the CLI, or from the environment for plain gunicorn."""

    config_file: Path | None = None  # a config.yaml, or a ConfigMap volume's file
    config_map: tuple[str, str] | None = None  # (namespace, name), watched through the API
    kubeconfig: str | None = None  # else in-cluster, else $KUBECONFIG / ~/.kube/config
    use_cluster: bool = True  # False: never contact an API (tests, `mutate`-like use)

    @classmethod
    def from_env(cls) -> Settings:
        """For `gunicorn 'webhook.app:create_app()'`: GPU_SCHEDULER_CONFIG or GPU_SCHEDULER_CONFIG_MAP."""
        config_map = os.environ.get("GPU_SCHEDULER_CONFIG_MAP")
        file = os.environ.get("GPU_SCHEDULER_CONFIG")
        return cls(
            config_file=Path(file) if file else None,
            config_map=tuple(config_map.split("/", 1)) if config_map else None,  # type: ignore[arg-type]
            kubeconfig=os.environ.get("KUBECONFIG"),
        )


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    if (settings.config_file is None) == (settings.config_map is None):
        raise ValueError("exactly one of config_file and config_map must be given")
    core_api = _core_api(settings)
    holder = sources.ConfigHolder()
    if settings.config_map is not None:
        if core_api is None:
            raise ValueError("--config-map needs cluster credentials, and none were found")
        namespace, name = settings.config_map
        sources.ConfigMapSource(core_api, namespace, name, holder).start()
    else:
        assert settings.config_file is not None
        sources.FileSource(settings.config_file, holder).start()
    namespace_labels = namespaces.NamespaceLabels(core_api).start()

    app = Flask("gpu-scheduler-webhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    app.extensions["gpu-scheduler"] = {"holder": holder, "namespaces": namespace_labels}

    @app.post("/mutate")
    def mutate() -> Any:
        started = time.perf_counter()
        try:
            body = json.loads(request.get_data(cache=False))
            review = reviews.parse(body)
        except (ValueError, RecursionError) as err:
            metrics.REQUESTS.labels("invalid").inc()
            message = str(err) if isinstance(err, reviews.ReviewError) else f"body: not valid JSON ({err})"
            return _error(400, message)
        answer, outcome = _answer(review, holder, namespace_labels)
        metrics.REQUESTS.labels(outcome).inc()
        metrics.LATENCY.observe(time.perf_counter() - started)
        return jsonify(answer)

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

    @app.errorhandler(RequestEntityTooLarge)
    def too_large(_: HTTPException) -> Any:
        metrics.REQUESTS.labels("invalid").inc()
        return _error(400, f"body: larger than the {MAX_BODY_BYTES // 2**20} MiB limit")

    @app.errorhandler(HTTPException)
    def http_error(err: HTTPException) -> Any:
        return _error(err.code or 500, err.description or err.name)

    return app


def _answer(
    review: reviews.Request,
    holder: sources.ConfigHolder,
    namespace_labels: namespaces.NamespaceLabels,
) -> tuple[reviews.AdmissionReview, str]:
    """The AdmissionReview to send and the outcome to count. Never raises."""
    if not review.is_pod_create:
        return reviews.response(review.uid), "ignored"
    settings = holder.current
    if settings is None:
        return reviews.response(review.uid, warnings=["gpu-scheduler: no valid config loaded; pod not mutated"]), "no_config"
    try:
        assert review.object is not None
        needs_namespace = any(r.namespace_selector is not None for r in settings.admission.rules)
        labels = namespace_labels.get(review.namespace) if needs_namespace else {}
        decision = patches.decide(review.object, namespace_labels=labels, settings=settings)
    except Exception:  # a bug must not block pod creation: admit unmutated, loudly
        log.exception("failed to decide on pod %s/%s", review.namespace, _pod_name(review.object))
        return reviews.response(review.uid, warnings=["gpu-scheduler: internal error; pod not mutated"]), "error"
    warnings = []
    if decision.namespace_unknown:
        warnings.append("gpu-scheduler: namespace labels unavailable; namespaceSelector rules skipped")
    if decision.rule is not None:
        metrics.RULE_MATCHES.labels(decision.rule).inc()
    audit = {"rule": decision.rule} if decision.rule else None
    answer = reviews.response(review.uid, patch=decision.patch, audit=audit, warnings=warnings)
    return answer, "patched" if decision.patch else "unchanged"


def _pod_name(pod: Any) -> str:
    metadata = (pod.get("metadata") or {}) if isinstance(pod, dict) else {}
    return str(metadata.get("name") or metadata.get("generateName") or "<unnamed>")


def _error(status: int, message: str) -> tuple[Response, int]:
    return jsonify(error=message, status=status), status


def _core_api(settings: Settings) -> Any | None:
    """A CoreV1Api, or None when there are no credentials (namespace selectors then cannot match)."""
    if not settings.use_cluster:
        return None
    from kubernetes import client

    from gpu_scheduler import kubeclient

    try:
        return client.CoreV1Api(kubeclient.api_client(settings.kubeconfig))
    except kubeclient.NoCredentials as err:
        log.warning("%s: rules with a namespaceSelector cannot match", err)
        return None
