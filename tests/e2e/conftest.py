"""Session fixtures for the end-to-end tests: one real control plane for the whole run.

Without the binaries the e2e tests skip with a message saying how to build them, except
under CI=true, where a missing control plane is a failure: CI must exercise the real thing.
When an e2e test fails, the tail of every component's log is attached to its report.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e import controlplane as cp

MISSING = (
    "control-plane binaries not built: run hack/control-plane.sh build "
    "(needs Go >= 1.26; builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and "
    "kubectl v1.32's kustomize into ~/.cache/gpu-scheduler)"
)

# Callables returning (title, text) of logs worth attaching when a test fails.
LOG_SOURCES: list[Callable[[], tuple[str, str]]] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in item.nodeid.replace(os.sep, "/"):
            item.add_marker(pytest.mark.e2e)


def require_binaries() -> None:
    """Skip without the control-plane binaries; under CI=true fail instead."""
    if cp.find_binaries() is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true and the e2e tests cannot run: {MISSING}")
        pytest.skip(MISSING)


@pytest.fixture(scope="session")
def plane() -> Iterator[cp.ControlPlane]:
    require_binaries()
    with cp.ControlPlane(extra_apiserver_args=cp.WORKLOAD_API_ARGS) as control_plane:
        LOG_SOURCES.append(lambda: ("control plane", control_plane.logs_tail(40)))
        yield control_plane


@pytest.fixture(scope="session")
def api(plane: cp.ControlPlane) -> Iterator[Any]:
    api_client = plane.api_client()
    api_client.configuration.connection_pool_maxsize = 64
    yield api_client
    api_client.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.failed and any(name.endswith("plane") for name in getattr(item, "fixturenames", ())):
        for source in LOG_SOURCES:
            try:
                title, text = source()
            except Exception as err:  # a log that cannot be read must not hide the failure
                title, text = "log source", f"unreadable: {err}"
            report.sections.append((f"logs: {title}", text))
    return report


WEBHOOK_NAMESPACE = "gpu-scheduler-system"
CONFIG_MAP = "gpu-scheduler-config"
E2E_CONFIG = """\
schedulerName: gpu-scheduler
admission:
  deletionCost: {initial: -50}
  rules:
    - name: research-a100
      namespaceSelector: {matchLabels: {team: research}}
      set: {gpuModel: A100, gpuMemoryMiB: 40960, deletionCost: -100}
    - name: any-gpu
      set: {gpuModel: "A100|H100"}
"""


@pytest.fixture(scope="session")
def installed_webhook(plane: cp.ControlPlane, api: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The webhook installed as an admin would: RBAC and ConfigMap from manifests/, certificates from
    `gpu-scheduler certs generate --ip 127.0.0.1`, `gpu-scheduler webhook --config-map` running as the
    webhook's service account, and the shipped MutatingWebhookConfiguration pointed at it by URL."""
    from tests.e2e import installing

    installation = installing.install_webhook(plane, api, tmp_path_factory.mktemp("webhook"), E2E_CONFIG)
    LOG_SOURCES.append(lambda: ("webhook", installation.server.logs()[-6000:]))
    yield installation
    installation.uninstall()


_skipped_in_ci: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    e2e = "tests/e2e/" in report.nodeid.replace(os.sep, "/")
    ran = hasattr(report, "wasxfail")  # an xfail ran and failed as declared, though reported as skipped
    if os.environ.get("CI") == "true" and e2e and report.skipped and not ran:
        _skipped_in_ci.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI=true an e2e test that skipped did not prove anything: fail the run."""
    if _skipped_in_ci:
        print(f"\nCI=true: {len(_skipped_in_ci)} e2e test(s) skipped; they must run in CI:")
        for nodeid in _skipped_in_ci:
            print(f"  {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def scheduler_kubeconfig(plane: cp.ControlPlane, installed_webhook: Any) -> Any:
    """A token of the scheduler's service account (TokenRequest) with the shipped RBAC applied: the e2e
    tests run `gpu-scheduler run` with exactly the permissions an installation gives it."""
    from tests.e2e import installing

    installing.apply_rbac(plane, "gpu-scheduler")
    return plane.kubeconfig_for_service_account(WEBHOOK_NAMESPACE, "gpu-scheduler")
