#!/usr/bin/env bash
# Build (once) the binaries of a local Kubernetes control plane for the e2e tests:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, from the Go module proxy with this
# machine's Go toolchain, and kustomize-v5.5.0, the kustomize that kubectl v1.32 embeds (the
# tests build every kustomization under manifests/ with both). Nothing is downloaded as a
# prebuilt binary and nothing lands in the repository: the generated build modules and the
# binaries live in a cache directory. At its end `build` runs hack/prometheus.sh build, hack/helm.sh build and
# hack/kube-score.sh build, so the same command gives the monitoring tests their Prometheus and promtool and the
# chart's tests their helm and kube-score (built, or found built, likewise; see there).
#
#   hack/control-plane.sh build      build unless the cache already holds this exact set; also fetch the
#                                    cert-manager CRDs (plain YAML from its Go module) for the overlay's test,
#                                    scheduler-plugins' coscheduling PodGroup CRD for the gang tests, and the
#                                    Prometheus Operator's ServiceMonitor and PrometheusRule CRDs for the chart's;
#                                    then hack/prometheus.sh, hack/helm.sh and hack/kube-score.sh build (their
#                                    progress and versions on stderr)
#   hack/control-plane.sh path       print the bin directory
#   hack/control-plane.sh versions   print each binary's version
#
# Environment:
#   GPU_SCHEDULER_CONTROL_PLANE_DIR   output dir (default ~/.cache/gpu-scheduler/control-plane/<k8s version>)
#   GPU_SCHEDULER_KUBERNETES_VERSION  k8s.io/kubernetes version (default v1.36.3)
#   GPU_SCHEDULER_ETCD_VERSION        go.etcd.io/etcd/server/v3 version (default v3.6.16)
#   GPU_SCHEDULER_CERT_MANAGER_VERSION  github.com/cert-manager/cert-manager version for the CRDs (default v1.21.2)
#   GPU_SCHEDULER_SCHEDULER_PLUGINS_VERSION  sigs.k8s.io/scheduler-plugins version for the PodGroup CRD (v0.34.7)
#   GPU_SCHEDULER_PROMETHEUS_OPERATOR_VERSION  github.com/prometheus-operator/prometheus-operator version for the
#                                    ServiceMonitor and PrometheusRule CRDs (default v0.85.0)
#   GPU_SCHEDULER_GOTOOLCHAIN         toolchain to fetch when the machine's Go is too old (default go1.27.3)
#   GPU_SCHEDULER_REBUILD=1           ignore the stamp and build again (Prometheus, Helm and kube-score too)
#   GPU_SCHEDULER_BUILD_HEARTBEAT     seconds between "still building" lines (default 30)
#   GO                                the go command (default: go on PATH, else /usr/local/go/bin/go)
#   and hack/prometheus.sh's: GPU_SCHEDULER_PROMETHEUS_DIR, GPU_SCHEDULER_PROMETHEUS_VERSION
#   and hack/helm.sh's: GPU_SCHEDULER_HELM_DIR, GPU_SCHEDULER_HELM_VERSION
#   and hack/kube-score.sh's: GPU_SCHEDULER_KUBE_SCORE_DIR, GPU_SCHEDULER_KUBE_SCORE_VERSION
#
# A cold build needs Go >= 1.26 and the Go module proxy, and takes 8-12 minutes on 2 cores (measured
# 8.5 and 11.5 before kube-controller-manager was added, which took 50 s more once the others' packages were
# in the build cache; kube-apiserver alone 6-9, kustomize about 30 s) with a peak of about 1.9 GB of memory;
# it leaves about 3.9 GB in the Go caches (1 GB modules, 2.9 GB build cache: `go env GOMODCACHE GOCACHE`)
# and 360 MB of binaries in the output dir. Prometheus then adds about 3.5 minutes (under 3 once the control plane's
# modules are fetched), 2.3 GB in the Go caches and 100 MB of binaries in its own cache dir; Helm under 3 minutes
# (2m36s after both: it shares little with them), 1.4 GB in the Go caches and a 64 MB binary in its own; kube-score
# about a minute (56 s with empty Go caches), 400 MB in the Go caches and a 16 MB binary. A warm run (the four caches
# hold their exact sets) takes under a second.
set -Eeuo pipefail

KUBE_VERSION="${GPU_SCHEDULER_KUBERNETES_VERSION:-v1.36.3}"
# The kustomize of kubectl v1.32: k8s.io/kubectl v0.32.0 to v0.32.3 require sigs.k8s.io/kustomize/kustomize/v5
# v5.5.0 (kustomize/api v0.18.0, kyaml v0.18.1). It panics on some inputs the newer one accepts (a whole
# object removed by `$patch: delete`); the manifests must build with both.
KUSTOMIZE_VERSION=v5.5.0
ETCD_VERSION="${GPU_SCHEDULER_ETCD_VERSION:-v3.6.16}"
CERT_MANAGER_VERSION="${GPU_SCHEDULER_CERT_MANAGER_VERSION:-v1.21.2}"
SCHEDULER_PLUGINS_VERSION="${GPU_SCHEDULER_SCHEDULER_PLUGINS_VERSION:-v0.34.7}"
PROMETHEUS_OPERATOR_VERSION="${GPU_SCHEDULER_PROMETHEUS_OPERATOR_VERSION:-v0.85.0}"
OUT_DIR="${GPU_SCHEDULER_CONTROL_PLANE_DIR:-$HOME/.cache/gpu-scheduler/control-plane/$KUBE_VERSION}"
BIN_DIR="$OUT_DIR/bin"
WORK_DIR="$OUT_DIR/build"
STAMP="$OUT_DIR/.stamp"
CRD_DIR="$OUT_DIR/crds/cert-manager"
COSCHEDULING_CRD_DIR="$OUT_DIR/crds/coscheduling"
PROMETHEUS_OPERATOR_CRD_DIR="$OUT_DIR/crds/prometheus-operator"
BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl "kustomize-$KUSTOMIZE_VERSION")

# "v1.36.3" -> major 1, minor 36, staging modules v0.36.3
if [[ ! "$KUBE_VERSION" =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
    echo "control-plane.sh: GPU_SCHEDULER_KUBERNETES_VERSION must look like v1.36.3, got '$KUBE_VERSION'" >&2
    exit 2
fi
KUBE_MAJOR="${BASH_REMATCH[1]}"
KUBE_MINOR="${BASH_REMATCH[2]}"
STAGING_VERSION="v0.${BASH_REMATCH[2]}.${BASH_REMATCH[3]}"

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=build-lib.sh
source "$HACK_DIR/build-lib.sh"
trap on_error ERR

stamp_text() {
    printf 'kubernetes=%s staging=%s etcd=%s kustomize=%s binaries=%s\n' "$KUBE_VERSION" "$STAGING_VERSION" \
        "$ETCD_VERSION" "$KUSTOMIZE_VERSION" "${BINARIES[*]}"
}

cmd_versions() {
    all_binaries_present || {
        echo "control-plane.sh: binaries missing in $BIN_DIR: run hack/control-plane.sh build" >&2
        exit 1
    }
    # first lines taken in bash: `cmd | head -n1` under pipefail fails when cmd gets SIGPIPE (exit 141)
    printf 'etcd:           %s\n' "$(first_line "$BIN_DIR/etcd" --version)"
    printf 'kube-apiserver: %s\n' "$(first_line "$BIN_DIR/kube-apiserver" --version)"
    printf 'kube-controller-manager: %s\n' "$(first_line "$BIN_DIR/kube-controller-manager" --version)"
    printf 'kube-scheduler: %s\n' "$(first_line "$BIN_DIR/kube-scheduler" --version)"
    printf 'kubectl:        %s\n' "$(first_line "$BIN_DIR/kubectl" version --client)"
    printf 'kustomize:      %s\n' "$(first_line "$BIN_DIR/kustomize-$KUSTOMIZE_VERSION" version)"
}

build_kubernetes() {
    local src gomod dir ldflags version_pkg b
    step "download k8s.io/kubernetes@$KUBE_VERSION"
    download_module k8s.io/kubernetes "$KUBE_VERSION"
    src="$MODULE_DIR"
    [[ -n "$src" && -f "$src/go.mod" ]] || fail "no go.mod for k8s.io/kubernetes@$KUBE_VERSION in the module cache (dir '$src')"
    gomod="$src/go.mod"

    step "generate the kubernetes build module ($WORK_DIR/kubernetes)"
    dir="$WORK_DIR/kubernetes"
    mkdir -p "$dir"
    local go_line godebug_lines staging
    go_line="$(awk '$1 == "go" { print $2; exit }' "$gomod")"
    [[ -n "$go_line" ]] || fail "no go directive in $gomod"
    godebug_lines="$(grep -E '^godebug[[:space:]]' "$gomod" || true)"
    # Every staging module, as the release's own go.mod lists it: "k8s.io/x => ./staging/src/k8s.io/x".
    staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "$gomod" | sort -u)"
    [[ -n "$staging" ]] || fail "found no '=> ./staging/...' replace lines in $gomod"
    {
        echo "// Generated by hack/control-plane.sh: builds the control-plane binaries of k8s.io/kubernetes."
        echo "module gpu-scheduler.local/control-plane/kubernetes"
        echo
        echo "go $go_line"
        [[ -z "$godebug_lines" ]] || printf '\n%s\n' "$godebug_lines"
        echo
        echo "require k8s.io/kubernetes $KUBE_VERSION"
        echo
        echo "replace ("
        while read -r m; do
            printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"
        done <<<"$staging"
        echo ")"
    } >"$dir/go.mod.new"
    install_go_mod "$dir"
    log "$(wc -l <<<"$staging") staging modules replaced with $STAGING_VERSION"
    ensure_toolchain "$go_line"

    ldflags="-s -w"
    for version_pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldflags+=" -X $version_pkg.gitVersion=$KUBE_VERSION"
        ldflags+=" -X $version_pkg.gitMajor=$KUBE_MAJOR"
        ldflags+=" -X $version_pkg.gitMinor=$KUBE_MINOR"
        ldflags+=" -X $version_pkg.gitTreeState=clean"
    done
    cd "$dir"
    step "resolve dependencies of k8s.io/kubernetes@$KUBE_VERSION"
    run "go get the kubernetes commands (k8s.io/kubernetes $KUBE_VERSION, staging modules $STAGING_VERSION)" \
        "$GO_BIN" get "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION" \
        "k8s.io/kubernetes/cmd/kube-controller-manager@$KUBE_VERSION" \
        "k8s.io/kubernetes/cmd/kube-scheduler@$KUBE_VERSION" "k8s.io/kubernetes/cmd/kubectl@$KUBE_VERSION"
    for b in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
        BUILT=$((BUILT + 1))
        step "build $BUILT/${#BINARIES[@]}: $b (k8s.io/kubernetes/cmd/$b@$KUBE_VERSION)"
        [[ $b != kube-apiserver ]] || log "    the longest: 6-9 minutes on 2 cores, silent but for the lines below"
        run "go build k8s.io/kubernetes/cmd/$b" \
            "$GO_BIN" build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$WORK_DIR/out/$b" "k8s.io/kubernetes/cmd/$b"
    done
}

# build_root_command NAME BINARY MODULE VERSION LDFLAGS: build the command whose main is the root package of
# MODULE@VERSION (etcd's server module, kustomize's) through a generated module in $WORK_DIR/NAME, into
# $WORK_DIR/out/BINARY.
build_root_command() {
    local name=$1 binary=$2 module=$3 version=$4 ldflags=$5 dir go_line src
    step "download $module@$version"
    download_module "$module" "$version"
    src="$MODULE_DIR"
    [[ -n "$src" && -f "$src/main.go" ]] || fail "no main.go in $module@$version (dir '$src')"
    step "generate the $name build module ($WORK_DIR/$name)"
    dir="$WORK_DIR/$name"
    mkdir -p "$dir"
    go_line="$(awk '$1 == "go" { print $2; exit }' "$src/go.mod")"
    {
        echo "// Generated by hack/control-plane.sh: builds $name, whose main is the root package of $module."
        echo "module gpu-scheduler.local/control-plane/$name"
        echo
        echo "go $go_line"
        echo
        echo "require $module $version"
    } >"$dir/go.mod.new"
    install_go_mod "$dir"
    ensure_toolchain "$go_line"
    cd "$dir"
    step "resolve dependencies of $module@$version"
    run "go get $module@$version" "$GO_BIN" get "$module@$version"
    BUILT=$((BUILT + 1))
    step "build $BUILT/${#BINARIES[@]}: $binary ($module@$version)"
    run "go build $module" \
        "$GO_BIN" build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$WORK_DIR/out/$binary" "$module"
}

# CRDs as plain YAML from a project's Go module, into DIR (a .version stamp skips the download next time):
#   fetch_crds WHAT MODULE VERSION DIR PATTERN...   (PATTERNs are globs relative to the module's root)
fetch_crds() {
    local what=$1 module=$2 version=$3 dir=$4
    shift 4
    [[ "$(cat "$dir/.version" 2>/dev/null)" != "$version" ]] || return 0
    step "find the Go toolchain"
    GO_BIN="$(find_go)" || fail "no go command found (set GO=/path/to/go)"
    step "download $module@$version ($what)"
    GOFLAGS=-modcacherw download_module "$module" "$version"
    mkdir -p "$dir"
    local pattern files
    for pattern in "$@"; do
        # shellcheck disable=SC2206 # the glob is meant to expand
        files=($MODULE_DIR/$pattern)
        [[ -f "${files[0]}" ]] || fail "no $pattern in $module@$version"
        cp "${files[@]}" "$dir/"
    done
    chmod u+w "$dir"/*.yaml
    echo "$version" >"$dir/.version"
    log "$what from $module $version in $dir"
}

build_control_plane() {
    # cert-manager.io's, so the apiserver validates the cert-manager overlay's Certificates and Issuers;
    # scheduler-plugins' coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1), which Kubeflow's operators emit
    # groups for, for the gang tests; the Prometheus Operator's ServiceMonitor and PrometheusRule, for the chart's
    # monitoring objects
    fetch_crds "the cert-manager CRDs" github.com/cert-manager/cert-manager "$CERT_MANAGER_VERSION" "$CRD_DIR" \
        "deploy/crds/cert-manager.io_*.yaml"
    fetch_crds "the PodGroup CRD" sigs.k8s.io/scheduler-plugins "$SCHEDULER_PLUGINS_VERSION" "$COSCHEDULING_CRD_DIR" \
        manifests/coscheduling/crd.yaml
    fetch_crds "the ServiceMonitor and PrometheusRule CRDs" github.com/prometheus-operator/prometheus-operator \
        "$PROMETHEUS_OPERATOR_VERSION" "$PROMETHEUS_OPERATOR_CRD_DIR" \
        example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml \
        example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml
    if already_built "control plane" "skipping the build"; then
        return 0
    fi
    step "find the Go toolchain"
    GO_BIN="$(find_go)" || fail "no go command found (set GO=/path/to/go)"
    log "using $("$GO_BIN" version) at $GO_BIN"
    JOBS="${GPU_SCHEDULER_BUILD_JOBS:-$(nproc)}"
    export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off
    mkdir -p "$WORK_DIR/out" "$BIN_DIR"
    rm -f "$STAMP"
    local started=$SECONDS
    BUILT=0
    build_root_command etcd etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" "-s -w"
    build_kubernetes
    # the version as kustomize's release build sets it (otherwise `kustomize version` says "(devel)")
    build_root_command kustomize "kustomize-$KUSTOMIZE_VERSION" sigs.k8s.io/kustomize/kustomize/v5 \
        "$KUSTOMIZE_VERSION" "-s -w -X sigs.k8s.io/kustomize/api/provenance.version=$KUSTOMIZE_VERSION"
    install_binaries "$started"
}

# Prometheus and promtool for the monitoring tests, built (or found built) by their own script. Its progress and
# versions go to stderr: stdout stays the control plane's versions.
build_prometheus() {
    step "Prometheus: hack/prometheus.sh build"
    bash "$HACK_DIR/prometheus.sh" build >&2
}

# helm for the chart's tests, likewise by its own script, its output on stderr.
build_helm() {
    step "Helm: hack/helm.sh build"
    bash "$HACK_DIR/helm.sh" build >&2
}

# kube-score for the chart's best-practice check, likewise.
build_kube_score() {
    step "kube-score: hack/kube-score.sh build"
    bash "$HACK_DIR/kube-score.sh" build >&2
}

cmd_build() {
    build_control_plane
    build_prometheus
    build_helm
    build_kube_score
}

case "${1:-}" in
build) cmd_build ;;
path) echo "$BIN_DIR" ;;
crds) echo "$CRD_DIR" ;;
versions) cmd_versions ;;
*)
    echo "usage: $0 build|path|crds|versions" >&2
    exit 2
    ;;
esac
