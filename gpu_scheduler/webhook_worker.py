"""The webhook's gunicorn worker: its watches, built after fork, handed to the Flask app.

Each worker owns a Kubernetes client, the configuration source (gpu_scheduler.sources) and the
Namespace label cache (gpu_scheduler.namespaces), and gives `webhook.app.create_app` only what it
reads: the configuration in force and a label lookup. `gpu-scheduler webhook` calls `create_app`
with its flags; plain gunicorn can too (`gunicorn 'gpu_scheduler.webhook_worker:create_app()'`),
configured from the environment.
"""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Flask

from gpu_scheduler import namespaces, sources
from webhook import app, reloading, resourceclaims

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Settings:
    """What a webhook worker needs; built by the CLI, or from the environment for plain gunicorn."""

    config_file: Path | None = None  # a config.yaml, or a ConfigMap volume's file
    config_map: tuple[str, str] | None = None  # (namespace, name), watched through the API
    kubeconfig: str | None = None  # else in-cluster, else $KUBECONFIG / ~/.kube/config
    use_cluster: bool = True  # False: never contact an API (tests, `mutate`-like use)

    @classmethod
    def from_env(cls) -> Settings:
        """For plain gunicorn: GPU_SCHEDULER_CONFIG or GPU_SCHEDULER_CONFIG_MAP (NS/NAME), and KUBECONFIG."""
        config_map = os.environ.get("GPU_SCHEDULER_CONFIG_MAP")
        file = os.environ.get("GPU_SCHEDULER_CONFIG")
        return cls(
            config_file=Path(file) if file else None,
            config_map=tuple(config_map.split("/", 1)) if config_map else None,  # type: ignore[arg-type]
            kubeconfig=os.environ.get("KUBECONFIG"),
        )


def create_app(settings: Settings | None = None) -> Flask:
    """Start this worker's watches and build its app."""
    settings = settings or Settings.from_env()
    if (settings.config_file is None) == (settings.config_map is None):
        raise ValueError("exactly one of config_file and config_map must be given")
    core_api = _core_api(settings)
    holder = reloading.ConfigHolder()
    sources.start(holder, config_file=settings.config_file, config_map=settings.config_map, core_api=core_api)
    namespace_labels = namespaces.NamespaceLabels(core_api).start()
    built = app.create_app(holder, namespace_labels=namespace_labels.get, claims=_claims(core_api))
    _freeze_startup_objects()
    return built


def _freeze_startup_objects() -> None:
    """Move every object the worker holds by now (the modules of Flask, the Kubernetes client and the rest, some
    60,000) out of the garbage collector's reach. A full collection over them took about 20 ms, and one landing
    mid-request was the webhook's whole tail latency; what requests allocate is still collected as usual."""
    gc.collect()
    gc.freeze()


def _claims(core_api: Any | None) -> app.Claims | None:
    """The pods' ResourceClaims and templates, each read with one GET when a pod names it (webhook.resourceclaims)."""
    if core_api is None:
        return None
    from gpu_scheduler import rawapi

    def fetch(path: str, timeout: float) -> bytes:
        return rawapi.request(core_api.api_client, "GET", path, None, timeout=timeout, retry=False)

    return resourceclaims.ClaimCache(fetch).get


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
