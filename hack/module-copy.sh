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
