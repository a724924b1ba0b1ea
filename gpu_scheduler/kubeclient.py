"""Finding cluster credentials the way kubectl and in-cluster clients do."""

from __future__ import annotations

import logging

from kubernetes import client, config

log = logging.getLogger(__name__)


class NoCredentials(RuntimeError):
    """Neither in-cluster credentials nor a kubeconfig were found."""


POOL_SIZE = 48  # connections kept per host: binders, reporters and watches run in parallel


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    """An ApiClient from `kubeconfig`, else in-cluster credentials, else $KUBECONFIG or ~/.kube/config."""
    configuration = client.Configuration()
    configuration.connection_pool_maxsize = POOL_SIZE
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        return client.ApiClient(configuration)
    try:
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except config.ConfigException:
        pass
    try:
        config.load_kube_config(client_configuration=configuration)
    except (config.ConfigException, FileNotFoundError, TypeError) as err:
        raise NoCredentials(f"no in-cluster service account and no usable kubeconfig ({err})") from err
    return client.ApiClient(configuration)
