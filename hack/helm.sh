#!/usr/bin/env bash
# Build (once) helm for the tests that install the chart with real Helm (tests/e2e/helm.py), from the Go module
# helm.sh/helm/v4 through the Go module proxy with this machine's Go toolchain, like the control plane
# (hack/control-plane.sh build runs this at its end). Nothing prebuilt is downloaded and nothing lands in the
# repository: the generated build module and the binary live in a cache directory.
#
# The command is built as Helm's Makefile builds a release (CGO_ENABLED=0, -trimpath, its version ldflags), so
# `helm version` names the release. `go build` alone resolves the packages helm imports; a `go get` of cmd/helm
# would only add two Windows-only modules (mousetrap, go-ansiterm) and 125 requirement lines, so there is none.
#
#   hack/helm.sh build      build unless the cache already holds this exact binary
#   hack/helm.sh path       print the bin directory
#   hack/helm.sh versions   print the binary's version
#
# Environment:
#   GPU_SCHEDULER_HELM_DIR      output dir (default ~/.cache/gpu-scheduler/helm/<version>)
#   GPU_SCHEDULER_HELM_VERSION  helm.sh/helm/v4 module version, which is the Helm release (default v4.3.2)
#   GPU_SCHEDULER_REBUILD=1     ignore the stamp and build again
#   GPU_SCHEDULER_BUILD_JOBS    go build -p (default: the number of cores)
#   and those of hack/build-lib.sh: GPU_SCHEDULER_GOTOOLCHAIN, GPU_SCHEDULER_BUILD_HEARTBEAT, GO
#
# A cold build needs Go >= 1.26 (older than the module's go directive: GPU_SCHEDULER_GOTOOLCHAIN is fetched) and
# the Go module proxy, and takes under 3 minutes on 2 cores (measured with empty Go caches: 2m49s, its 121 module
# downloads included; 2m36s after the control plane's and Prometheus' builds, which share little with it: Helm 4.3
# is on k8s.io v0.37, the control plane on v0.36) with a peak of about 1.1 GB of memory; it leaves about 1.7 GB in
# the Go caches (545 MB modules, 1.2 GB build cache; 1.4 GB after the others) and a 64 MB binary in the output dir.
# A warm run (the cache holds this exact binary) takes under a second.
set -Eeuo pipefail

HELM_VERSION="${GPU_SCHEDULER_HELM_VERSION:-v4.3.2}"
MODULE=helm.sh/helm/v4
OUT_DIR="${GPU_SCHEDULER_HELM_DIR:-$HOME/.cache/gpu-scheduler/helm/$HELM_VERSION}"
BIN_DIR="$OUT_DIR/bin"
WORK_DIR="$OUT_DIR/build"
STAMP="$OUT_DIR/.stamp"
BINARIES=(helm)

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=build-lib.sh
source "$HACK_DIR/build-lib.sh"
trap on_error ERR

stamp_text() {
    printf 'helm=%s binaries=%s\n' "$HELM_VERSION" "${BINARIES[*]}"
}

cmd_versions() {
    all_binaries_present || {
        echo "helm.sh: binaries missing in $BIN_DIR: run hack/helm.sh build" >&2
        exit 1
    }
    printf 'helm: %s\n' "$(first_line "$BIN_DIR/helm" version)"
}

# The version flags of Helm's Makefile for a tagged release: version is the tag, metadata is empty (a tagged
# build is not "unreleased"), the tree is clean. gitCommit stays empty: the module proxy does not say which commit
# the tag is, and an empty one keeps `helm version --short` to the bare version. The variables live in
# internal/version (Helm 3 and 4 so far) or pkg/version; -X on a variable that does not exist is silently ignored,
# hence the check after the build.
version_ldflags() {
    local package=$1
    printf '%s' "-X $package.version=$HELM_VERSION -X $package.metadata= -X $package.gitCommit="
    printf '%s' " -X $package.gitTreeState=clean"
}

cmd_build() {
    if already_built "Helm"; then
        return 0
    fi
    local jobs="${GPU_SCHEDULER_BUILD_JOBS:-$(nproc)}" started=$SECONDS ldflags reported version_dir candidate
    start_build
    prepare_module helm "$MODULE" "$HELM_VERSION" cmd/helm
    version_dir=""
    for candidate in internal/version pkg/version; do
        if grep -qs gitTreeState "$SRC/$candidate/version.go"; then
            version_dir=$candidate
            break
        fi
    done
    [[ -n "$version_dir" ]] || fail "no internal/version or pkg/version with gitTreeState in $MODULE@$HELM_VERSION"
    ldflags="-s -w $(version_ldflags "$MODULE/$version_dir")"
    cd "$DIR"
    step "build 1/1: helm ($MODULE/cmd/helm@$HELM_VERSION)"
    log "    under 3 minutes from cold on 2 cores, silent but for the lines below"
    run "go build $MODULE/cmd/helm" "$GO_BIN" build -p "$jobs" -trimpath -ldflags "$ldflags" \
        -o "$WORK_DIR/out/helm" "$MODULE/cmd/helm"
    step "check that the built helm names its release"
    reported="$(first_line "$WORK_DIR/out/helm" version)"
    [[ "$reported" == *"Version:\"$HELM_VERSION\""* ]] ||
        fail "helm version says '$reported', not Version:\"$HELM_VERSION\" (did the version ldflags miss?)"
    install_binaries "$started"
}

dispatch "$@"
