"""`hack/control-plane.sh` as a newcomer runs it, with a stand-in `go` so no module is fetched.

The stand-in answers the few go commands the script uses: `mod download -json` points at small
module trees made here, and `build` writes a fake binary after a pause, long enough for the
script's "still building" heartbeat to show.
"""

import os
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "hack" / "control-plane.sh"

FAKE_BINARY = """#!/usr/bin/env bash
# Prints far more than a pipe holds, as `kubectl version --client` may: a reader that stops after
# one line makes it die of SIGPIPE.
echo "$(basename "$0") version v1.36.3 (fake)"
for _ in $(seq 2000); do echo "more output that nobody reads ................................."; done
"""

FAKE_GO = """#!/usr/bin/env bash
case "$1" in
version) echo "go version go1.26.8 linux/amd64" ;;
env) echo "go1.26.8" ;;
mod)  # mod download -json MODULE@VERSION
    module="${4%@*}"
    printf '{\\n\\t"Path": "%s",\\n\\t"Dir": "%s/%s"\\n}\\n' "$module" "$FAKE_MODULES" "$module" ;;
get) ;;
build)
    while [[ "$1" != "-o" ]]; do shift; done
    out="$2"
    [[ "$out" != */kube-apiserver ]] || sleep "$FAKE_APISERVER_SECONDS"
    cp "$FAKE_BINARY" "$out" && chmod +x "$out" ;;
*) echo "fake go: unexpected: $*" >&2; exit 1 ;;
esac
"""


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_toolchain(tmp_path):
    modules = tmp_path / "modules"
    kubernetes = modules / "k8s.io" / "kubernetes"
    kubernetes.mkdir(parents=True)
    (kubernetes / "go.mod").write_text(
        "module k8s.io/kubernetes\n\ngo 1.26.0\n\nreplace (\n"
        "\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/client-go => ./staging/src/k8s.io/client-go\n)\n")
    etcd = modules / "go.etcd.io" / "etcd" / "server" / "v3"
    etcd.mkdir(parents=True)
    (etcd / "go.mod").write_text("module go.etcd.io/etcd/server/v3\n\ngo 1.25.0\n")
    (etcd / "main.go").write_text("package main\n")
    crds = modules / "github.com" / "cert-manager" / "cert-manager" / "deploy" / "crds"
    crds.mkdir(parents=True)
    (crds / "cert-manager.io_certificates.yaml").write_text("kind: CustomResourceDefinition\n")
    env = {
        **os.environ,
        "GO": str(_executable(tmp_path / "go", FAKE_GO)),
        "FAKE_BINARY": str(_executable(tmp_path / "fake-binary", FAKE_BINARY)),
        "FAKE_MODULES": str(modules),
        "FAKE_APISERVER_SECONDS": "2.5",
        "GPU_SCHEDULER_BUILD_HEARTBEAT": "1",
        "GPU_SCHEDULER_CONTROL_PLANE_DIR": str(tmp_path / "cache"),
    }
    return env


def _script(env, *args):
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_cold_build_names_each_binary_shows_it_is_alive_and_totals(fake_toolchain):
    result = _script(fake_toolchain, "build")
    assert result.returncode == 0, result.stderr
    assert "FAILED" not in result.stderr
    for number, binary in enumerate(("etcd", "kube-apiserver", "kube-scheduler", "kubectl"), start=1):
        assert f"build {number}/4: {binary} " in result.stderr
    assert "... still: build 2/4: kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver@v1.36.3), 1s so far" in result.stderr
    assert "built etcd kube-apiserver kube-scheduler kubectl in " in result.stderr
    assert "kubectl:        kubectl version v1.36.3 (fake)" in result.stdout


def test_a_warm_run_and_versions_never_report_a_false_failure(fake_toolchain):
    assert _script(fake_toolchain, "build").returncode == 0
    for args in (["build"], ["versions"]):
        result = _script(fake_toolchain, *args)
        assert result.returncode == 0, result.stderr
        assert "FAILED" not in result.stderr
        lines = result.stdout.splitlines()
        assert lines[-4:] == [f"{name + ':':<15} {name} version v1.36.3 (fake)"
                              for name in ("etcd", "kube-apiserver", "kube-scheduler", "kubectl")]


def test_a_failing_build_names_the_step_and_the_command(fake_toolchain):
    broken = {**fake_toolchain, "FAKE_BINARY": "/nonexistent"}
    result = _script(broken, "build")
    assert result.returncode != 0
    assert 'FAILED in step "build 1/4: etcd' in result.stderr
    assert "go build go.etcd.io/etcd/server/v3" in result.stderr


def test_versions_without_a_build_says_what_to_run(tmp_path):
    result = _script({**os.environ, "GPU_SCHEDULER_CONTROL_PLANE_DIR": str(tmp_path)}, "versions")
    assert result.returncode == 1
    assert "run hack/control-plane.sh build" in result.stderr
    assert "FAILED" not in result.stderr
