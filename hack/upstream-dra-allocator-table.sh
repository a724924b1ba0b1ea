#!/usr/bin/env bash
# Regenerate tests/data/upstream/dra_allocator.json: upstream Kubernetes' shared DRA allocator
# test table (TestAllocator's `testcases` in k8s.io/dynamic-resource-allocation@v0.36.3
# structured/internal/allocatortesting/allocator_testing.go) as data, with the outcome the
# incubating allocator (the variant v1.36's default feature gates select) really produced.
#
#   hack/upstream-dra-allocator-table.sh      # needs Go >= 1.26; the module proxy if deps are not cached
#
# The facts (inputs, expected allocations and errors) are upstream's: a case is written only
# after upstream's own assertions passed for it, so its results equal upstream's expectation.
# Cases the incubating variant skips (unsupported features) are written with "skip" and no
# outcome. The code that checks our allocator against this data is ours (tests/). Nothing is
# edited by hand; the output is sorted and byte-identical on every run.
#
# Data conventions (see hack/upstream-dra-allocator-table/zz_dump.go.txt): "node" is the node
# passed to Allocate (upstream's default node-1/region-1 when the case sets none), with its
# always-empty status left out; "allocated_shared" holds SharedDeviceID.String()
# ("driver/pool/device/shareUID"); shareIDs in "results" are random in the allocator and, as
# in upstream's test, replaced by aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa; "results" keeps the
# allocator's order (one per claim; null when it found no allocation on this node).
set -euo pipefail

version=v0.36.3
mod=k8s.io/dynamic-resource-allocation
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/tests/data/upstream/dra_allocator.json
export GOWORK=off # the copy is a module of its own; its go.sum is complete, so -mod=readonly (default) suffices

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# 1. A writable copy of the module as released (the module cache is read-only), fetched via a
#    throwaway module when it is not cached yet.
# shellcheck source=hack/module-copy.sh
. "$repo/hack/module-copy.sh"
writable_module_copy "$mod" "$version" "$work"
cd "$work/m"

# 2. Upstream's tests must pass unmodified, or the recorded outcomes would mean nothing.
go test -count=1 ./structured/internal/incubating/

# 3. Hook our recorder (zz_dump.go) into RunTestAllocator: note the table's identity (the
#    lexicographical table shares RunTestAllocator), record skips, and record each run case
#    in a deferred call, i.e. after upstream's assertions (which t.Fatal on failure). The
#    allocationResult matcher gets an order-sensitive mode, only to report order differences.
at=structured/internal/allocatortesting
cp "$repo/hack/upstream-dra-allocator-table/zz_dump.go.txt" "$at/zz_dump.go"
sed -i \
	-e 's/^\(\t*\)\(RunTestAllocator(t, supportedFeatures, newAllocator, testcases)\)$/\1dumpTable(t, testcases)\n\1\2/' \
	-e 's/^\(\t*\)\(t.Skipf("SKIP: required feature(s) %v not supported by allocator", sets.List(missing))\)$/\1dumpSkip(t, testcases, name, tc, fmt.Sprintf("required feature(s) %v not supported by allocator", sets.List(missing)))\n\1\2/' \
	-e 's/"Results": gomega.ConsistOf(results), \/\/ Order is irrelevant./"Results": dumpDeviceResults(results),/' \
	-e 's/^\(\t*\)\(results, err := allocator.Allocate(ctx, tc.node, unwrap(claimsToAllocate...))\)$/\1\2\n\1defer func() { dumpRun(t, testcases, name, tc, results, err) }()/' \
	"$at/allocator_testing.go"
for hook in dumpTable dumpSkip dumpRun '"Results": dumpDeviceResults'; do # fail loudly if upstream's code moved
	[ "$(grep -c "^\s*\(defer func() { \)\?$hook(" "$at/allocator_testing.go")" = 1 ] || { echo "patch for $hook did not apply" >&2; exit 1; }
done

# 4. Run the incubating variant twice (-count=2: the recorder fails if any case's record
#    differs between the runs) and install the result.
DRA_TABLE_OUT=$work/out.json go test -count=2 -run '^TestAllocator$' ./structured/internal/incubating/
mkdir -p "$(dirname "$out")"
mv "$work/out.json" "$out"
sed 's/^/note: /' "$work/out.json.notes" >&2
python3 - "$out" <<'EOF'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
run = [c for c in cases if "skip" not in c]
print("%d cases: %d run, %d skipped, %d with error, %d with null results" % (len(cases), len(run),
      len(cases) - len(run), sum(c["error"] is not None for c in run), sum(c["results"] is None for c in run)))
EOF
