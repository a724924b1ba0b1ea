"""The real `helm`, as `hack/helm.sh build` puts it in a cache directory, for the tests that prove the chart.

Each call runs the binary with its own homes: HELM_CACHE_HOME, HELM_CONFIG_HOME and HELM_DATA_HOME point into one
temp dir per test process (so `repo add` then `install` share them, and nothing of the developer's Helm setup,
repositories, plugins or registry logins, takes part), every other HELM_* variable of the environment is dropped,
and KUBECONFIG is the one a test passes or, without one, a file that does not exist: a test never reaches the
developer's cluster through ~/.kube/config.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path


from tests.e2e import controlplane as cp

HELM_VERSION = "v4.3.2"  # helm.sh/helm/v4's module version, which is the release, as hack/helm.sh builds it
BINARIES = ("helm",)
MISSING = (
    "helm not built: run hack/helm.sh build, or hack/control-plane.sh build, which runs it "
    f"(needs Go >= 1.26 and the Go module proxy; builds helm {HELM_VERSION} into ~/.cache/gpu-scheduler)"
)


TOOL = cp.CachedTool("GPU_SCHEDULER_HELM_DIR", "helm", HELM_VERSION, BINARIES,
                    "Helm tests", MISSING)  # CI must prove the chart with real Helm
find_binaries = TOOL.find
require_binaries = TOOL.require


class HelmError(cp.CommandError):
    """helm exited non-zero."""


@functools.cache
def _home() -> Path:
    """This process's Helm homes, removed at exit."""
    home = Path(tempfile.mkdtemp(prefix="gpu-scheduler-helm-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def _environment(kubeconfig: Path | str | None) -> dict[str, str]:
    home = _home()
    env = {name: value for name, value in os.environ.items() if not name.startswith("HELM_")}
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
        KUBECONFIG=str(kubeconfig) if kubeconfig is not None else str(home / "no-kubeconfig"),
    )
    return env


def helm(*args: str | Path, kubeconfig: Path | str | None = None, namespace: str | None = None, check: bool = True,
         timeout: float = 120.0, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `helm ARGS` (with `--namespace NAMESPACE` when given, `stdin` on its standard input, e.g. for
    `--values -`); returns what it printed and its exit code. With `check`, a non-zero exit raises HelmError."""
    command = [str(TOOL.bin_dir() / "helm"), *(str(arg) for arg in args)]
    if namespace is not None:
        command += ["--namespace", namespace]
    result = subprocess.run(command, env=_environment(kubeconfig), input=stdin, capture_output=True, text=True,
                            timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise HelmError(result)
    return result
