#!/usr/bin/env bash
# Regenerate tests/data/upstream/dra_plugin.json and dra_score.json: kube-scheduler v1.36.3's DynamicResources
# plugin test table (TestPlugin's `testcases` in k8s.io/kubernetes@v1.36.3
# pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go) as data: each
# case's inputs as Kubernetes objects, its feature switches, and the PreEnqueue, PreFilter and
# per-node Filter statuses and Score / NormalizeScore results upstream's plugin returned, beside
# the ones the table expects.
#
#   hack/upstream-dra-plugin-table.sh      # needs Go >= 1.26 and the module proxy (or a warm module cache)
#
# The facts are upstream's: a case is written only after all of upstream's own assertions for
# it passed (a case that fails upstream fails this script). The code that checks our scheduler
# core against this data is ours (tests/unit/test_upstream_dra_plugin.py); it also decides
# which cases we cannot model. Nothing is edited by hand; the output is sorted and
# byte-identical on every run (see the note on time stamps in
# hack/upstream-dra-plugin-table/zz_dump.go.txt).
set -euo pipefail

version=v1.36.3
staging=v0.36.3
repo=$(cd "$(dirname "$0")/.." && pwd)
out=$repo/tests/data/upstream/dra_plugin.json
score_out=$repo/tests/data/upstream/dra_score.json

# 1. A writable copy of k8s.io/kubernetes as released, with its staging modules' releases.
# shellcheck source=hack/module-copy.sh
. "$repo/hack/module-copy.sh"
kubernetes_module_copy "$version" "$staging"

# 2. Hook our recorder (zz_dump_test.go) into testPlugin: note when the table is built and
#    when patchTestCase runs (time stamps), set up the records once per run, begin a record
#    after each case's setup and finish it in a deferred call, i.e. after upstream's
#    assertions, and note each PreEnqueue, PreFilter and Filter status.
pkg=pkg/scheduler/framework/plugins/dynamicresources
cp "$repo/hack/upstream-dra-plugin-table/zz_dump.go.txt" "$pkg/zz_dump_test.go"
cp "$repo/hack/upstream-dra-plugin-table/zz_score.go.txt" "$pkg/zz_score_test.go"
sed -i \
	-e 's/^\(\t*\)\(testcases := map\[string\]testPluginCase{\)$/\1dumpTableBuilt = time.Now()\n\1\2/' \
	-e 's/^\(\t*\)\(if len(tc.skipOnWindows) > 0 \&\& goruntime.GOOS == "windows" {\)$/\1dumpTable(tCtx, testcases)\n\1\2/' \
	-e 's/^\(\t*\)\(if tc.patchTestCase != nil {\)$/\1dumpPatchedAt = time.Now()\n\1\2/' \
	-e 's/^\(\t*\)\(testCtx := setup(tCtx, tc.args, nodes, tc.claims, tc.classes, tc.podGroups, tc.objs, feats, tc.failPatch, tc.reactors)\)$/\1\2\n\1dumpRec := dumpBegin(name, \&tc, nodes)\n\1defer dumpRec.finish(tCtx)/' \
	-e 's/^\(\t*\)\(status := testCtx.p.PreEnqueue(tCtx, tc.pod)\)$/\1\2\n\1dumpRec.preEnqueue(status)/' \
	-e 's/^\(\t*\)\(result, status := testCtx.p.PreFilter(tCtx, testCtx.state, tc.pod, \[\]fwk.NodeInfo{nodeInfo})\)$/\1\2\n\1dumpRec.preFilter(status)/' \
	-e 's/^\(\t*\)\(status = testCtx.p.Filter(ctx, testCtx.state, tc.pod, nodeInfo)\)$/\1\2\n\1dumpRec.filter(nodeInfo.Node().Name, status)/' \
	-e 's/^\(\t*\)\(score, status := testCtx.p.Score(tCtx, testCtx.state, tc.pod, potentialNode)\)$/\1\2\n\1dumpRec.score(potentialNode.Node().Name, score)/' \
	-e 's/^\(\t*\)\(status := testCtx.p.NormalizeScore(tCtx, testCtx.state, tc.pod, scores)\)$/\1\2\n\1dumpRec.normalized(scores)/' \
	-e 's/^\(\t*\)\(score, err := computeScore(iterator, tc.allocations)\)$/\1\2\n\1scoreDumpComputed(t, name, tc.claims, tc.allocations, tc.expectedScore, tc.expectErr, score, err)/' \
	-e 's/^\(\t*\)\(_ = pl.NormalizeScore(context.Background(), nil, nil, scores)\)$/\1scoreDumpNormalizing(t, name, scores, tc.expectedScores)\n\1\2/' \
	"$pkg/dynamicresources_test.go"
for hook in 'dumpTableBuilt = ' 'dumpTable(' 'dumpPatchedAt = ' 'dumpRec := dumpBegin(' 'defer dumpRec.finish(' 'dumpRec.preEnqueue(' 'dumpRec.preFilter(' 'dumpRec.filter(' 'dumpRec.score(' 'dumpRec.normalized(' 'scoreDumpComputed(' 'scoreDumpNormalizing('; do
	# fail loudly if upstream's code moved
	[ "$(grep -cF "$hook" "$pkg/dynamicresources_test.go")" = 1 ] || { echo "patch for $hook did not apply" >&2; exit 1; }
done

#    Likewise hook zz_score_test.go into Test_computesScore (after computeScore) and
#    TestNormalizeScore (before NormalizeScore, which normalises in place).

# 3. Run the tests twice (-count=2: the plugin recorder fails if any case's record differs
#    between the runs, or if any case was not recorded; the score records of the second run
#    overwrite the first's) and install the results.
DRA_TABLE_OUT=$work/out.json DRA_SCORE_OUT=$work/score.json \
	go test -count=2 -run '^(TestPlugin|Test_computesScore|TestNormalizeScore)$' "./$pkg/"
mkdir -p "$(dirname "$out")"
mv "$work/out.json" "$out"
mv "$work/score.json" "$score_out"
python3 - "$out" "$score_out" <<'EOF'
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
print("%d cases: %d rejected in PreEnqueue, %d in PreFilter, %d with a Filter rejection or error" % (
    len(cases), sum(c["preenqueue"]["got"] is not None for c in cases),
    sum((c["prefilter"] or {}).get("got") is not None and c["prefilter"]["got"]["code"] != "Skip" for c in cases),
    sum(any(p["got"] is not None for p in c["filter"].values()) for c in cases)))
scores = json.load(open(sys.argv[2]))
print("score: %d computeScore cases, %d NormalizeScore cases" % (len(scores["compute_score"]), len(scores["normalize_score"])))
EOF
