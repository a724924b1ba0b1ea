"""Namespace labels for namespaceSelector rules, from a watched cache.

Admission must answer in milliseconds, so labels come from a Namespace watch kept in
memory. A namespace not yet in the cache is fetched once (a miss is not a failure). When
the API cannot be reached the answer is None: rules with a namespaceSelector then do not
match, the pod is still admitted, and a metric and a log line say so.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import watching
from webhook import metrics

log = logging.getLogger(__name__)


class NamespaceLabels:
    """`get(name)` -> the namespace's labels, or None when they cannot be known."""

    def __init__(self, core_api: Any | None, *, fetch_timeout: float = 2.0):
        self._api = core_api
        self._fetch_timeout = fetch_timeout
        self._labels: dict[str, dict[str, str]] = {}
        self._reflector: watching.Reflector | None = None
        if core_api is not None:
            self._reflector = watching.Reflector(
                core_api.list_namespace,
                name="Namespaces",
                on_replace=self._replace,
                on_event=self._event,
            )

    def start(self) -> NamespaceLabels:
        if self._reflector is not None:
            self._reflector.start()
        return self

    def stop(self) -> None:
        if self._reflector is not None:
            self._reflector.stop()

    def get(self, name: str) -> Mapping[str, str] | None:
        cached = self._labels.get(name)
        if cached is not None:
            return cached
        if self._api is None:
            metrics.NAMESPACE_LOOKUP_FAILURES.inc()
            return None
        try:
            namespace = self._api.read_namespace(name, _request_timeout=self._fetch_timeout)
        except (ApiException, HTTPError, OSError) as err:
            metrics.NAMESPACE_LOOKUP_FAILURES.inc()
            log.warning("labels of namespace %r unavailable (%s); namespaceSelector rules skipped", name, err)
            return None
        labels = dict(namespace.metadata.labels or {})
        self._labels[name] = labels
        return labels

    def _replace(self, items: list[dict[str, Any]]) -> None:
        self._labels = {ns["metadata"]["name"]: dict(ns["metadata"].get("labels") or {}) for ns in items}

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        metadata = obj["metadata"]
        if kind == "DELETED":
            self._labels.pop(metadata["name"], None)
        else:
            self._labels[metadata["name"]] = dict(metadata.get("labels") or {})
