#!/usr/bin/env bash
# Build (once) kube-score, the linter for Kubernetes best practice the chart's tests run on every rendered object
# (tests/e2e/kubescore.py), from its Go module github.com/zegl/kube-score through the Go module proxy with this
# machine's Go toolchain, like the control plane (hack/control-plane.sh build runs this at its end). Nothing prebuilt
# is downloaded and nothing lands in the repository.
#
# Built as its release is (.goreleaser.yml: CGO_ENABLED=0 and goreleaser's default ldflags, -s -w -X main.version,
# main.commit, main.date), so `kube-score version` names the release and the build's date; the commit stays N/A, as
# the source has it: the module proxy does not say which commit the tag is.
#
#   hack/kube-score.sh build      build unless the cache already holds this exact binary
#   hack/kube-score.sh path       print the bin directory
#   hack/kube-score.sh versions   print the binary's version
#
# Environment:
#   GPU_SCHEDULER_KUBE_SCORE_DIR      output dir (default ~/.cache/gpu-scheduler/kube-score/<version>)
#   GPU_SCHEDULER_KUBE_SCORE_VERSION  github.com/zegl/kube-score module version, the release (default v1.20.0)
#   GPU_SCHEDULER_REBUILD=1           ignore the stamp and build again
#   GPU_SCHEDULER_BUILD_JOBS          go build -p (default: the number of cores)
#   and those of hack/build-lib.sh: GPU_SCHEDULER_GOTOOLCHAIN, GPU_SCHEDULER_BUILD_HEARTBEAT, GO
#
# A cold build needs the Go module proxy and takes about a minute on 2 cores (measured with empty Go caches: 56 s,
# its 28 module downloads included) with a peak of about 450 MB of memory; it leaves about 400 MB in the Go caches
# (150 MB modules, 250 MB build cache) and a 16 MB binary in the output dir. A warm run (the cache holds this exact
# binary) takes under a second.
set -Eeuo pipefail

KUBE_SCORE_VERSION="${GPU_SCHEDULER_KUBE_SCORE_VERSION:-v1.20.0}"
MODULE=github.com/zegl/kube-score
OUT_DIR="${GPU_SCHEDULER_KUBE_SCORE_DIR:-$HOME/.cache/gpu-scheduler/kube-score/$KUBE_SCORE_VERSION}"
BIN_DIR="$OUT_DIR/bin"
WORK_DIR="$OUT_DIR/build"
STAMP="$OUT_DIR/.stamp"
BINARIES=(kube-score)

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=build-lib.sh
source "$HACK_DIR/build-lib.sh"
trap on_error ERR

stamp_text() {
    printf 'kube-score=%s binaries=%s\n' "$KUBE_SCORE_VERSION" "${BINARIES[*]}"
}

cmd_versions() {
    all_binaries_present || {
        echo "kube-score.sh: binaries missing in $BIN_DIR: run hack/kube-score.sh build" >&2
        exit 1
    }
    printf 'kube-score: %s\n' "$(first_line "$BIN_DIR/kube-score" version)"
}

cmd_build() {
    if already_built "kube-score"; then
        return 0
    fi
    local jobs="${GPU_SCHEDULER_BUILD_JOBS:-$(nproc)}" started=$SECONDS release date expected reported
    # goreleaser's .Version (the tag without its v) and .Date (the build's time, RFC 3339 in UTC); -X on a variable
    # that does not exist is silently ignored, hence the check after the build
    release="${KUBE_SCORE_VERSION#v}"
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    expected="kube-score version: $release, commit: N/A, built: $date"
    start_build
    prepare_module kube-score "$MODULE" "$KUBE_SCORE_VERSION" cmd/kube-score
    cd "$DIR"
    step "build 1/1: kube-score ($MODULE/cmd/kube-score@$KUBE_SCORE_VERSION)"
    log "    about a minute from cold on 2 cores, silent but for the lines below"
    run "go build $MODULE/cmd/kube-score" "$GO_BIN" build -p "$jobs" -trimpath \
        -ldflags "-s -w -X main.version=$release -X main.date=$date" -o "$WORK_DIR/out/kube-score" \
        "$MODULE/cmd/kube-score"
    step "check that the built kube-score names its release"
    reported="$(first_line "$WORK_DIR/out/kube-score" version)"
    [[ "$reported" == "$expected" ]] ||
        fail "kube-score version says '$reported', not '$expected' (did the version ldflags miss?)"
    install_binaries "$started"
}

dispatch "$@"
