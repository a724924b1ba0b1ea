# Sourced by hack/upstream-*-table.sh: a writable copy of a Go module as released.

# writable_module_copy MODULE VERSION WORKDIR: copy MODULE@VERSION (fetched through a throwaway module when the
# module cache lacks it) to WORKDIR/m and make it writable (the module cache is read-only).
writable_module_copy() {
	local mod=$1 version=$2 work=$3
	local src
	src=$(go env GOMODCACHE)/$mod@$version
	if [ ! -d "$src" ]; then
		(cd "$work" && go mod init throwaway >/dev/null 2>&1 && go mod download "$mod@$version")
	fi
	cp -r "$src" "$work/m"
	chmod -R u+w "$work/m"
}

# kubernetes_module_copy VERSION STAGING: in a temporary WORK directory (removed on exit), a writable_module_copy of
# k8s.io/kubernetes@VERSION whose staging modules (k8s.io/api, ...), which its go.mod names by relative paths its
# module zip does not contain, point at their releases STAGING (what VERSION was tagged with). Sets `work`, and
# leaves the shell in the copy with Go workspaces off and go.mod updates allowed.
kubernetes_module_copy() {
	local version=$1 staging=$2
	export GOWORK=off GOFLAGS=-mod=mod
	work=$(mktemp -d)
	trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
	writable_module_copy k8s.io/kubernetes "$version" "$work"
	cd "$work/m"
	rm -f go.work go.work.sum
	for dep in $(sed -n '/^replace (/,/^)/p' go.mod | awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}'); do
		go mod edit -replace="$dep=$dep@$staging"
	done
}
