"""`hack/control-plane.sh` as a newcomer runs it, with a stand-in `go` so no module is fetched.

The stand-in answers the few go commands the script uses: `mod download -json` points at small
module trees made here, and `build` writes a fake binary after a pause, long enough for the
script's "still building" heartbeat to show. The fake helm prints the version that the build's
-ldflags gave Helm's internal/version package, the fake kube-score the version and date they gave its main
package's variables (those its cmd_version.go declares: -X ignores the others), as the real ones would.
"""

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "hack" / "control-plane.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kustomize-v5.5.0")

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
    ldflags=""
    while [[ "$1" != "-o" ]]; do
        [[ "$1" != -ldflags ]] || ldflags="$2"
        shift
    done
    out="$2"
    [[ "$out" != */kube-apiserver ]] || sleep "$FAKE_APISERVER_SECONDS"
    if [[ "$out" == */kube-score ]]; then
        declared="$(cat "$FAKE_MODULES/github.com/zegl/kube-score/cmd/kube-score/cmd_version.go" 2>/dev/null)" || true
        version=development date=N/A
        [[ "$declared" != *"var version"* ]] || version="$(grep -o 'main.version=[^ ]*' <<<"$ldflags" | cut -d= -f2)"
        [[ "$declared" != *"var date"* ]] || date="$(grep -o 'main.date=[^ ]*' <<<"$ldflags" | cut -d= -f2)"
        printf '#!/usr/bin/env bash\necho "kube-score version: %s, commit: N/A, built: %s"\n' "$version" "$date" \
            >"$out"
        chmod +x "$out"
    elif [[ "$out" == */helm ]]; then
        version="$(grep -o 'helm.sh/helm/v4/internal/version.version=[^ ]*' <<<"$ldflags" | cut -d= -f2)" || true
        cat >"$out" <<FAKE
#!/usr/bin/env bash
echo 'version.BuildInfo{Version:"$version", GitCommit:"", GitTreeState:"clean", GoVersion:"go1.26.8"}'
FAKE
        chmod +x "$out"
    else
        cp "$FAKE_BINARY" "$out" && chmod +x "$out"
    fi ;;
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
    coscheduling = modules / "sigs.k8s.io" / "scheduler-plugins" / "manifests" / "coscheduling"
    coscheduling.mkdir(parents=True)
    (coscheduling / "crd.yaml").write_text("kind: CustomResourceDefinition\n")
    monitoring = modules / "github.com" / "prometheus-operator" / "prometheus-operator" / "example" / \
        "prometheus-operator-crd"
    monitoring.mkdir(parents=True)
    for kind in ("servicemonitors", "prometheusrules"):
        (monitoring / f"monitoring.coreos.com_{kind}.yaml").write_text("kind: CustomResourceDefinition\n")
    kustomize = modules / "sigs.k8s.io" / "kustomize" / "kustomize" / "v5"
    kustomize.mkdir(parents=True)
    (kustomize / "go.mod").write_text("module sigs.k8s.io/kustomize/kustomize/v5\n\ngo 1.22.7\n")
    (kustomize / "main.go").write_text("package main\n")
    prometheus = modules / "github.com" / "prometheus" / "prometheus"
    (prometheus / "cmd" / "prometheus").mkdir(parents=True)
    (prometheus / "cmd" / "promtool").mkdir(parents=True)
    (prometheus / "go.mod").write_text("module github.com/prometheus/prometheus\n\ngo 1.26.7\n")
    (prometheus / "VERSION").write_text("3.16.0\n")
    helm = modules / "helm.sh" / "helm" / "v4"
    (helm / "cmd" / "helm").mkdir(parents=True)
    (helm / "internal" / "version").mkdir(parents=True)
    (helm / "go.mod").write_text("module helm.sh/helm/v4\n\ngo 1.26.0\n")
    (helm / "internal" / "version" / "version.go").write_text(
        'package version\n\nvar (\n\tversion = "v4.3"\n\tmetadata = ""\n\tgitCommit = ""\n\tgitTreeState = ""\n)\n')
    kube_score = modules / "github.com" / "zegl" / "kube-score"
    (kube_score / "cmd" / "kube-score").mkdir(parents=True)
    (kube_score / "go.mod").write_text("module github.com/zegl/kube-score\n\ngo 1.23.0\n")
    (kube_score / "cmd" / "kube-score" / "cmd_version.go").write_text(
        'package main\n\nvar version = "development"\nvar commit = "N/A"\nvar date = "N/A"\n')
    env = {
        **os.environ,
        "GO": str(_executable(tmp_path / "go", FAKE_GO)),
        "FAKE_BINARY": str(_executable(tmp_path / "fake-binary", FAKE_BINARY)),
        "FAKE_MODULES": str(modules),
        "FAKE_APISERVER_SECONDS": "0",  # the cold-build test alone waits for a heartbeat
        "GPU_SCHEDULER_BUILD_HEARTBEAT": "1",
        "GPU_SCHEDULER_CONTROL_PLANE_DIR": str(tmp_path / "cache"),
        "GPU_SCHEDULER_PROMETHEUS_DIR": str(tmp_path / "prometheus"),
        "GPU_SCHEDULER_HELM_DIR": str(tmp_path / "helm"),
        "GPU_SCHEDULER_KUBE_SCORE_DIR": str(tmp_path / "kube-score"),
    }
    return env


def _script(env, *args):
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_cold_build_names_each_binary_shows_it_is_alive_and_totals(fake_toolchain):
    result = _script({**fake_toolchain, "FAKE_APISERVER_SECONDS": "1.6"}, "build")
    assert result.returncode == 0, result.stderr
    assert "FAILED" not in result.stderr
    for number, binary in enumerate(BINARIES, start=1):
        assert f"build {number}/6: {binary} " in result.stderr
    assert "... still: build 2/6: kube-apiserver (k8s.io/kubernetes/cmd/kube-apiserver@v1.36.3), 1s so far" in result.stderr
    assert "build 6/6: kustomize-v5.5.0 (sigs.k8s.io/kustomize/kustomize/v5@v5.5.0)" in result.stderr
    assert f"built {' '.join(BINARIES)} in " in result.stderr
    assert "kustomize:      kustomize-v5.5.0 version v1.36.3 (fake)" in result.stdout
    assert "build 2/2: promtool (github.com/prometheus/prometheus/cmd/promtool@v0.316.0, tags remove_all_sd)" \
        in result.stderr
    assert "promtool:   promtool version v1.36.3 (fake)" in result.stderr
    assert "build 1/1: helm (helm.sh/helm/v4/cmd/helm@v4.3.2)" in result.stderr
    assert 'helm: version.BuildInfo{Version:"v4.3.2", GitCommit:"", GitTreeState:"clean"' in result.stderr
    assert "build 1/1: kube-score (github.com/zegl/kube-score/cmd/kube-score@v1.20.0)" in result.stderr
    assert re.search(r"kube-score: kube-score version: 1\.20\.0, commit: N/A, built: \d{4}-\d\d-\d\dT[\d:]{8}Z\n",
                     result.stderr)


def test_a_warm_run_and_versions_never_report_a_false_failure(fake_toolchain):
    assert _script(fake_toolchain, "build").returncode == 0
    for args in (["build"], ["versions"]):
        result = _script(fake_toolchain, *args)
        assert result.returncode == 0, result.stderr
        assert "FAILED" not in result.stderr
        lines = result.stdout.splitlines()
        assert lines[-6:] == [f"{name + ':':<15} {binary} version v1.36.3 (fake)"
                              for name, binary in zip(("etcd", "kube-apiserver", "kube-controller-manager",
                                                       "kube-scheduler", "kubectl", "kustomize"), BINARIES)]


def test_a_cache_stamped_before_kustomize_was_added_is_built_again(fake_toolchain):
    """The stamp names the kustomize version, so the stamp of an older cache no longer counts as built."""
    assert _script(fake_toolchain, "build").returncode == 0
    cache = Path(fake_toolchain["GPU_SCHEDULER_CONTROL_PLANE_DIR"])
    (cache / ".stamp").write_text("kubernetes=v1.36.3 staging=v0.36.3 etcd=v3.6.16\n")
    result = _script(fake_toolchain, "build")
    assert result.returncode == 0, result.stderr
    assert "skipping the build" not in result.stderr
    assert "build 6/6: kustomize-v5.5.0 " in result.stderr
    assert "kustomize=v5.5.0" in (cache / ".stamp").read_text()


def test_a_failing_build_names_the_step_and_the_command(fake_toolchain):
    broken = {**fake_toolchain, "FAKE_BINARY": "/nonexistent"}
    result = _script(broken, "build")
    assert result.returncode != 0
    assert 'FAILED in step "build 1/6: etcd' in result.stderr
    assert "go build go.etcd.io/etcd/server/v3" in result.stderr


def test_versions_without_a_build_says_what_to_run(tmp_path):
    result = _script({**os.environ, "GPU_SCHEDULER_CONTROL_PLANE_DIR": str(tmp_path)}, "versions")
    assert result.returncode == 1
    assert "run hack/control-plane.sh build" in result.stderr
    assert "FAILED" not in result.stderr


def test_helm_without_the_version_package_fails_instead_of_building_a_helm_that_says_v4_3(fake_toolchain):
    """-X on a variable that does not exist is silently ignored: a Helm that moved its version package must stop
    the build, not leave a helm whose `version` is the source's default."""
    helm_module = Path(fake_toolchain["FAKE_MODULES"]) / "helm.sh" / "helm" / "v4"
    (helm_module / "internal" / "version" / "version.go").unlink()
    result = subprocess.run(["bash", str(SCRIPT.parent / "helm.sh"), "build"], env=fake_toolchain,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "no internal/version or pkg/version with gitTreeState in helm.sh/helm/v4@v4.3.2" in result.stderr
    assert not (Path(fake_toolchain["GPU_SCHEDULER_HELM_DIR"]) / "bin" / "helm").exists()


def _kube_score(env, *args):
    return subprocess.run(["bash", str(SCRIPT.parent / "kube-score.sh"), *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_kube_score_is_built_once_and_again_for_another_version(fake_toolchain):
    """The stamp names the version, which goes to the binary as goreleaser's main.version (the tag without its v)."""
    out_dir = Path(fake_toolchain["GPU_SCHEDULER_KUBE_SCORE_DIR"])
    cold = _kube_score(fake_toolchain, "build")
    assert cold.returncode == 0, cold.stderr
    assert re.fullmatch(r"kube-score: kube-score version: 1\.20\.0, commit: N/A, built: \S+Z\n", cold.stdout)
    assert _kube_score(fake_toolchain, "path").stdout == f"{out_dir / 'bin'}\n"

    warm = _kube_score(fake_toolchain, "build")
    assert warm.returncode == 0, warm.stderr
    assert "kube-score already built in" in warm.stderr and "go build" not in warm.stderr
    assert warm.stdout == cold.stdout

    other = _kube_score({**fake_toolchain, "GPU_SCHEDULER_KUBE_SCORE_VERSION": "v1.19.0"}, "build")
    assert other.returncode == 0, other.stderr
    assert "build 1/1: kube-score (github.com/zegl/kube-score/cmd/kube-score@v1.19.0)" in other.stderr
    assert other.stdout.startswith("kube-score: kube-score version: 1.19.0, ")
    assert (out_dir / ".stamp").read_text() == "kube-score=v1.19.0 binaries=kube-score\n"


def test_kube_score_whose_version_variables_moved_fails_instead_of_installing_a_development_build(fake_toolchain):
    """-X on a variable that does not exist is silently ignored: the check after the build stops it."""
    kube_score_module = Path(fake_toolchain["FAKE_MODULES"]) / "github.com" / "zegl" / "kube-score"
    (kube_score_module / "cmd" / "kube-score" / "cmd_version.go").unlink()
    result = _kube_score(fake_toolchain, "build")
    assert result.returncode == 1
    assert 'FAILED in step "check that the built kube-score names its release"' in result.stderr
    assert "kube-score version says 'kube-score version: development, commit: N/A, built: N/A', not " \
           "'kube-score version: 1.20.0, commit: N/A, built: " in result.stderr
    assert not (Path(fake_toolchain["GPU_SCHEDULER_KUBE_SCORE_DIR"]) / "bin" / "kube-score").exists()
