# shellcheck shell=bash
# Sourced by hack/control-plane.sh, hack/prometheus.sh, hack/helm.sh and hack/kube-score.sh: what they need to build
# commands from Go modules with this machine's Go and to say, while they do, which step is running and for how long.
#
# The caller sets `set -Eeuo pipefail` and `trap on_error ERR`, GO_BIN (from find_go) before download_module or
# ensure_toolchain, and WORK_DIR (download_module's scratch file goes there). Messages name the calling script.
#
# Environment:
#   GPU_SCHEDULER_GOTOOLCHAIN       toolchain to fetch when the machine's Go is too old (default go1.27.3)
#   GPU_SCHEDULER_BUILD_HEARTBEAT   seconds between "still building" lines (default 30)
#   GO                              the go command (default: go on PATH, else /usr/local/go/bin/go)

SCRIPT_NAME="${0##*/}"
FALLBACK_TOOLCHAIN="${GPU_SCHEDULER_GOTOOLCHAIN:-go1.27.3}"
STEP="start"
HEARTBEAT="${GPU_SCHEDULER_BUILD_HEARTBEAT:-30}"

log() { printf '==> [%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# "75" -> "1m15s"
elapsed() { if (($1 >= 60)); then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi; }
step() { STEP="$*"; log "$STEP"; }
fail() {
    printf '%s: FAILED in step "%s": %s\n' "$SCRIPT_NAME" "$STEP" "$*" >&2
    exit 1
}
# Put DIR/go.mod.new in force as DIR/go.mod, starting from a fresh go.sum whenever the
# requested versions changed (go.mod.gen remembers what was generated last time).
install_go_mod() {
    local dir=$1
    if ! cmp -s "$dir/go.mod.new" "$dir/go.mod.gen" 2>/dev/null; then
        cp "$dir/go.mod.new" "$dir/go.mod"
        cp "$dir/go.mod.new" "$dir/go.mod.gen"
        rm -f "$dir/go.sum"
    fi
    rm -f "$dir/go.mod.new"
}
on_error() {
    local rc=$?
    printf '%s: FAILED in step "%s" (exit %s) at line %s: %s\n' \
        "$SCRIPT_NAME" "$STEP" "$rc" "${BASH_LINENO[0]}" "$BASH_COMMAND" >&2
    exit "$rc"
}

# heartbeat CMD...: run CMD and return its exit code; a go build is silent for minutes, so every
# $HEARTBEAT s say that the step is still running and for how long.
heartbeat() {
    local pid started=$SECONDS next=$((SECONDS + HEARTBEAT)) polls=0
    # a quick command is not held up by the polling; a long build is polled every 0.32 s
    local delays=(0.01 0.02 0.04 0.08 0.16 0.32)
    "$@" &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS >= next)); then
            log "... still: $STEP, $(elapsed $((SECONDS - started))) so far"
            next=$((SECONDS + HEARTBEAT))
        fi
        sleep "${delays[polls]}"
        ((polls < ${#delays[@]} - 1)) && polls=$((polls + 1))
    done
    wait "$pid"
}

# run DESCRIPTION CMD...: run a command, naming the step and the command if it fails.
run() {
    local what="$1"
    shift
    local rc=0
    heartbeat "$@" || rc=$?
    if ((rc != 0)); then
        printf '%s: FAILED in step "%s": %s\n  command (in %s): %s\n  exit code: %s\n' \
            "$SCRIPT_NAME" "$STEP" "$what" "$PWD" "$*" "$rc" >&2
        exit "$rc"
    fi
}

find_go() {
    if [[ -n "${GO:-}" ]]; then
        echo "$GO"
    elif command -v go >/dev/null 2>&1; then
        command -v go
    elif [[ -x /usr/local/go/bin/go ]]; then
        echo /usr/local/go/bin/go
    else
        return 1
    fi
}

# first_line CMD...: the first line of what CMD prints.
first_line() {
    local out
    out="$("$@")"
    printf '%s\n' "${out%%$'\n'*}"
}

# download_module MODULE VERSION: fetch it through the proxy; sets MODULE_DIR to its source.
download_module() {
    local json="$WORK_DIR/download.json"
    mkdir -p "$WORK_DIR"
    if ! heartbeat "$GO_BIN" mod download -json "$1@$2" >"$json"; then
        # with -json the reason is in the output's "Error" field, not on stderr
        grep '"Error"' "$json" >&2 || cat "$json" >&2
        fail "go mod download -json $1@$2 (module $1, version $2) failed"
    fi
    # shellcheck disable=SC2034 # the caller reads it
    MODULE_DIR="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' "$json")"
}

# If the module's go directive needs a newer Go than this machine's, fetch a toolchain.
ensure_toolchain() {
    local need="$1" have
    have="$("$GO_BIN" env GOVERSION)"
    have="${have#go}"
    if [[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" != "$need" ]]; then
        log "Go $have is older than the required $need: using GOTOOLCHAIN=$FALLBACK_TOOLCHAIN"
        export GOTOOLCHAIN="$FALLBACK_TOOLCHAIN"
    fi
}

# all_binaries_present: every name in the caller's BINARIES is an executable in its BIN_DIR.
all_binaries_present() {
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x "$BIN_DIR/$b" ]] || return 1
    done
}

# already_built WHAT: true, after saying so and printing the versions, when the cache holds this exact set: every
# binary there and the caller's stamp_text in $STAMP (unless GPU_SCHEDULER_REBUILD=1).
already_built() {
    [[ "${GPU_SCHEDULER_REBUILD:-0}" != 1 ]] && all_binaries_present &&
        [[ "$(cat "$STAMP" 2>/dev/null)" == "$(stamp_text)" ]] || return 1
    log "$1 already built in $BIN_DIR ($(stamp_text)): ${2:-nothing to build}"
    cmd_versions
}

# install_binaries STARTED: move the caller's BINARIES from $WORK_DIR/out into $BIN_DIR, stamp the set (the
# caller's stamp_text) and say how long the build took since STARTED ($SECONDS then).
install_binaries() {
    local b
    step "install the binaries into $BIN_DIR"
    for b in "${BINARIES[@]}"; do
        run "install $b" mv -f "$WORK_DIR/out/$b" "$BIN_DIR/$b"
    done
    stamp_text >"$STAMP"
    log "built ${BINARIES[*]} in $(elapsed $((SECONDS - $1))) into $BIN_DIR"
    cmd_versions
}

# start_build: find the Go toolchain and prepare a build of the caller's BINARIES (its stamp removed until done).
start_build() {
    step "find the Go toolchain"
    GO_BIN="$(find_go)" || fail "no go command found (set GO=/path/to/go)"
    log "using $("$GO_BIN" version) at $GO_BIN"
    export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off
    mkdir -p "$WORK_DIR/out" "$BIN_DIR"
    rm -f "$STAMP"
}

# prepare_module NAME MODULE VERSION COMMAND_DIR...: download MODULE@VERSION (SRC: its source, which must hold each
# COMMAND_DIR), generate the build module $WORK_DIR/NAME requiring it (DIR), and fetch a newer toolchain if its go
# directive needs one.
prepare_module() {
    local name=$1 module=$2 version=$3 go_line wanted
    shift 3
    step "download $module@$version"
    download_module "$module" "$version"
    SRC="$MODULE_DIR"
    [[ -n "$SRC" && -f "$SRC/go.mod" ]] || fail "no go.mod in $module@$version (dir '$SRC')"
    for wanted in "$@"; do
        [[ -d "$SRC/$wanted" ]] || fail "no $wanted in $module@$version (dir '$SRC')"
    done
    step "generate the $name build module ($WORK_DIR/$name)"
    DIR="$WORK_DIR/$name"
    mkdir -p "$DIR"
    go_line="$(awk '$1 == "go" { print $2; exit }' "$SRC/go.mod")"
    [[ -n "$go_line" ]] || fail "no go directive in $SRC/go.mod"
    {
        echo "// Generated by hack/$name.sh: builds $* of $module."
        echo "module gpu-scheduler.local/$name"
        echo
        echo "go $go_line"
        echo
        echo "require $module $version"
    } >"$DIR/go.mod.new"
    install_go_mod "$DIR"
    ensure_toolchain "$go_line"
}

# dispatch COMMAND: a build script's commands: build (cmd_build), path (its bin directory), versions (cmd_versions).
dispatch() {
    case "${1:-}" in
    build) cmd_build ;;
    path) echo "$BIN_DIR" ;;
    versions) cmd_versions ;;
    *)
        echo "usage: $0 build|path|versions" >&2
        exit 2
        ;;
    esac
}
