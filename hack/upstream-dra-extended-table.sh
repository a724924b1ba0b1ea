#!/usr/bin/env bash
# Regenerate tests/data/upstream/dra_extended_requests.json: kube-scheduler v1.36.3's tables for
# the device requests and mappings the DynamicResources plugin makes for extended resources served
# by DRA (Test_createRequestsAndMappings_requests and Test_createRequestsAndMappings_mappings in
# k8s.io/kubernetes@v1.36.3 pkg/scheduler/framework/plugins/dynamicresources/
# extendeddynamicresources_test.go) as data: each case's pod as a Kubernetes object, the
# extendedResources map, the DeviceClassResolver's mapping (resource name -> class name), and
# the device requests and mappings upstream's createRequestsAndMappings returned.
#
#   hack/upstream-dra-extended-table.sh      # needs Go >= 1.26 and the module proxy (or a warm module cache)
#
# The facts are upstream's: a case is written only after all of upstream's own assertions for
# it passed (a case that fails upstream fails this script). The code that checks our port
# (scheduler_core/dra/extended.py) against this data is ours
# (tests/unit/test_upstream_dra_extended.py). Nothing is edited by hand; the output is sorted
# and byte-identical on every run (see hack/upstream-dra-extended-table/zz_dump.go.txt for the
# data conventions).
set -euo pipefail

version=v1.36.3
staging=v0.36.3
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/tests/data/upstream/dra_extended_requests.json

# 1. A writable copy of k8s.io/kubernetes as released, with its staging modules' releases.
# shellcheck source=hack/module-copy.sh
. "$repo/hack/module-copy.sh"
kubernetes_module_copy "$version" "$staging"

# 2. Hook our recorder (zz_dump_test.go) into both tests: set up the records right before each
#    test's loop over its cases (written when the test ends); in each case's t.Run, keep the
#    result upstream's test discards (mappings in the requests test, requests in the mappings
#    test) under a name of ours, begin a record right after the call (before the mappings test
#    sorts its mappings in place) and finish it in a deferred call, i.e. after upstream's
#    assertions.
pkg=pkg/scheduler/framework/plugins/dynamicresources
test_file=$pkg/extendeddynamicresources_test.go
cp "$repo/hack/upstream-dra-extended-table/zz_dump.go.txt" "$pkg/zz_dump_test.go"
sed -i \
	-e 's/^\(\t*\)\(for name, tc := range testcases {\)$/\1dumpTable(t, len(testcases))\n\1\2/' \
	-e 's/^\(\t*\)gotDeviceRequests, _ := \(createRequestsAndMappings(tc.pod, tc.extendedResources, logger, tc.cache)\)$/\1gotDeviceRequests, dumpGotMappings := \2\n\1dumpRec := dumpBegin(t, name, "requests", tc.pod, tc.extendedResources, tc.cache, gotDeviceRequests, dumpGotMappings)\n\1defer dumpRec.finish(t)/' \
	-e 's/^\(\t*\)_, gotReqMappings := \(createRequestsAndMappings(tc.pod, tc.extnededResources, logger, tc.deviceClassMapping)\)$/\1dumpGotRequests, gotReqMappings := \2\n\1dumpRec := dumpBegin(t, name, "mappings", tc.pod, tc.extnededResources, tc.deviceClassMapping, dumpGotRequests, gotReqMappings)\n\1defer dumpRec.finish(t)/' \
	"$test_file"
for hook in 'dumpTable(t, len(testcases)):2' 'dumpRec := dumpBegin(t, name, "requests",:1' 'dumpRec := dumpBegin(t, name, "mappings",:1' 'defer dumpRec.finish(t):2'; do
	# fail loudly if upstream's code moved
	[ "$(grep -cF "${hook%:*}" "$test_file")" = "${hook##*:}" ] || { echo "patch for ${hook%:*} did not apply" >&2; exit 1; }
done

# 3. Run both tests twice (-count=2: the recorder fails if any case's record differs between the
#    runs, or if any case was not recorded) and install the result.
DRA_EXTENDED_OUT=$work/out.json \
	go test -count=2 -run '^Test_createRequestsAndMappings_(requests|mappings)$' "./$pkg/"
mkdir -p "$(dirname "$out")"
mv "$work/out.json" "$out"
python3 - "$out" <<'EOF'
import collections, json, sys
cases = json.load(open(sys.argv[1]))["cases"]
per_test = collections.Counter(c["test"] for c in cases)
if sorted(per_test) != ["Test_createRequestsAndMappings_mappings", "Test_createRequestsAndMappings_requests"]:
    sys.exit("dump: tests recorded: %s" % sorted(per_test))
print("%d cases: %s" % (len(cases), ", ".join("%d of %s" % (n, t) for t, n in sorted(per_test.items()))))
EOF
