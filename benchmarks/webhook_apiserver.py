"""Admission overhead as the apiserver sees it: a burst of pod creations through the real kube-apiserver, with our
webhook registered and without, read from the apiserver's own histograms.

One etcd + kube-apiserver from `hack/control-plane.sh build` (no kube-controller-manager, no scheduler: the pods
are only created). The webhook is installed as the e2e tests install it: its RBAC and ConfigMap from manifests/
(the bundled examples/config.yaml, whose rules select namespaces by label), `gpu-scheduler webhook --config-map`
running as its service account (so its Namespace watch runs against this apiserver), and the shipped
MutatingWebhookConfiguration pointed at it by URL. The burst's namespace is labelled as the rules expect
(`gpu-scheduler.io/inject=enabled`, `team=research`), and every pod asks for a GPU, so each creation is admitted
by the webhook and patched.

For each round, two bursts of --pods (1000) pods created by --threads (32) client threads, in alternating order:

  (a) with the webhook registered
  (b) with no MutatingWebhookConfiguration at all: the apiserver's own cost of creating a pod

and from the apiserver's /metrics, the increase over the burst of

  apiserver_admission_webhook_admission_duration_seconds{name="pods.gpu-scheduler.io"}  (a): the webhook
      call as the apiserver times it (TLS, the request, our answer, applying the patch), p50 / p99
  apiserver_request_duration_seconds{verb="POST",resource="pods"}  (a) and (b): the whole create, p50 / p99

Percentiles come from the histogram buckets, interpolated within a bucket as Prometheus' histogram_quantile does
(the webhook histogram's buckets are 5, 25, 100 ms...: a p99 between 5 and 25 ms is an estimate). Client-side
create latency (p50 / p99) is printed beside them.

    python benchmarks/webhook_apiserver.py [--pods 1000] [--rounds 3] [--threads 32] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.e2e import controlplane as cp  # noqa: E402
from tests.e2e import installing  # noqa: E402

WEBHOOK_NAME = "pods.gpu-scheduler.io"  # the shipped MutatingWebhookConfiguration's webhook
NAMESPACE = "ml"
WEBHOOK_HISTOGRAM = "apiserver_admission_webhook_admission_duration_seconds"
REQUEST_HISTOGRAM = "apiserver_request_duration_seconds"


def histogram(text: str, name: str, labels: dict[str, str]) -> dict[float, float]:
    """Cumulative bucket counts (le -> count) of the series of `name` whose labels include `labels`, summed."""
    buckets: dict[float, float] = {}
    prefix = f"{name}_bucket{{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        body, _, value = line.rpartition(" ")
        pairs = dict(part.split("=", 1) for part in body[len(prefix):-1].split(",") if "=" in part)
        found = {key: raw.strip('"') for key, raw in pairs.items()}
        if all(found.get(key) == wanted for key, wanted in labels.items()):
            bound = float("inf") if found["le"] == "+Inf" else float(found["le"])
            buckets[bound] = buckets.get(bound, 0.0) + float(value)
    return buckets


def quantile(q: float, before: dict[float, float], after: dict[float, float]) -> float | None:
    """histogram_quantile over the increase from `before` to `after`, in seconds."""
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts):
        if count >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = bound, count
    return None


def scrape(api: Any) -> str:
    """The apiserver's /metrics (the admin's client certificate may read them)."""
    response: Any = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/metrics", timeout=30.0)
    if response.status != 200:
        raise RuntimeError(f"GET /metrics: HTTP {response.status}")
    return str(response.data.decode())


def pod_body(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"app": "resnet", "job-type": "training"}},
            "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                                     "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "4", "memory": "16Gi"}}}]}}


def burst(core: Any, prefix: str, pods: int, threads: int = 32) -> list[float]:
    """Create `pods` pods with `threads` client threads; each creation's latency in seconds."""
    def create(i: int) -> float:
        started = time.perf_counter()
        core.create_namespaced_pod(NAMESPACE, pod_body(f"{prefix}-{i:05d}"))
        return time.perf_counter() - started
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(create, range(pods)))


def measure(plane: Any, api: Any, label: str, pods: int, *, webhook: bool, threads: int = 32) -> dict[str, Any]:
    from kubernetes import client

    core: Any = client.CoreV1Api(api)
    before = scrape(api)
    latencies = sorted(burst(core, label, pods, threads))
    after = scrape(api)
    core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0)
    post = {"verb": "POST", "resource": "pods"}
    result: dict[str, Any] = {
        "create_p50_ms": 1000 * statistics.median(latencies),
        "create_p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "apiserver_create_p50_ms": _ms(quantile(0.5, histogram(before, REQUEST_HISTOGRAM, post),
                                                histogram(after, REQUEST_HISTOGRAM, post))),
        "apiserver_create_p99_ms": _ms(quantile(0.99, histogram(before, REQUEST_HISTOGRAM, post),
                                                histogram(after, REQUEST_HISTOGRAM, post))),
    }
    if webhook:
        ours = {"name": WEBHOOK_NAME, "operation": "CREATE", "type": "admit"}
        calls = histogram(after, WEBHOOK_HISTOGRAM, ours)
        result.update(
            webhook_calls=int(max(calls.values(), default=0) - max(histogram(before, WEBHOOK_HISTOGRAM, ours).values(),
                                                                  default=0)),
            webhook_p50_ms=_ms(quantile(0.5, histogram(before, WEBHOOK_HISTOGRAM, ours), calls)),
            webhook_p99_ms=_ms(quantile(0.99, histogram(before, WEBHOOK_HISTOGRAM, ours), calls)))
        patched = core.list_namespaced_pod(NAMESPACE, limit=1)
        result["patched"] = None if not patched.items else patched.items[0].spec.scheduler_name == "gpu-scheduler"
    return result


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1000 * seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=1000, help="pods per burst")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the two bursts alternating; medians")
    parser.add_argument("--threads", type=int, default=32, help="client threads creating the pods")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if cp.find_binaries() is None:
        print("control-plane binaries missing: run hack/control-plane.sh build", file=sys.stderr)
        return 2
    from kubernetes import client
    from tqdm import tqdm

    work = Path(tempfile.mkdtemp(prefix="webhook-apiserver-bench-"))
    results: dict[str, list[dict[str, Any]]] = {"with webhook": [], "no webhook": []}
    with cp.ControlPlane(controller_manager=False) as plane:
        api = plane.api_client()
        core: Any = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE, "labels": {
            "gpu-scheduler.io/inject": "enabled", "team": "research"}}})
        installation = installing.install_webhook(plane, api, work, (ROOT / "examples" / "config.yaml").read_text())
        admission: Any = client.AdmissionregistrationV1Api(api)
        registered = admission.read_mutating_webhook_configuration(installing.WEBHOOK_CONFIGURATION)
        registered.metadata.resource_version = None
        try:
            # warm both paths (TLS sessions, the webhook's caches, the apiserver's) before measuring
            measure(plane, api, "warm", min(args.pods, 200), webhook=True)
            steps = [(r, with_hook) for r in range(args.rounds)
                     for with_hook in ((True, False) if r % 2 == 0 else (False, True))]
            for r, with_hook in tqdm(steps, desc="bursts", unit="burst", file=sys.stderr):
                if with_hook:
                    if not _admitted(core):
                        admission.create_mutating_webhook_configuration(registered)
                    installing.wait_for(lambda: _admitted(core), what="the webhook to admit pods", timeout=30)
                else:
                    if _admitted(core):
                        admission.delete_mutating_webhook_configuration(installing.WEBHOOK_CONFIGURATION)
                    installing.wait_for(lambda: not _admitted(core), what="pods created unmutated", timeout=30)
                name = "with webhook" if with_hook else "no webhook"
                results[name].append(measure(plane, api, f"r{r}-{'a' if with_hook else 'b'}", args.pods,
                                             webhook=with_hook, threads=args.threads))
        finally:
            installation.uninstall()
    summary = {name: {key: statistics.median(v) if (v := [r[key] for r in rounds if r.get(key) is not None])
                      else None for key in rounds[0] if key != "patched"} for name, rounds in results.items()}
    if args.json:
        print(json.dumps({"pods": args.pods, "rounds": results, "summary": summary}, indent=2))
        return 0
    print(f"\n{args.pods} pods per burst, {args.threads} client threads, medians of {args.rounds} round(s)")
    print(f"{'burst':<14}{'webhook p50':>13}{'webhook p99':>13}{'create p50':>12}{'create p99':>12}"
          f"{'client p50':>12}{'client p99':>12}   (ms; webhook and create: the apiserver's histograms)")
    for name, s in summary.items():
        print(f"{name:<14}{_fmt(s.get('webhook_p50_ms')):>13}{_fmt(s.get('webhook_p99_ms')):>13}"
              f"{_fmt(s['apiserver_create_p50_ms']):>12}{_fmt(s['apiserver_create_p99_ms']):>12}"
              f"{_fmt(s['create_p50_ms']):>12}{_fmt(s['create_p99_ms']):>12}")
    print("per round (with webhook): webhook p99 " + ", ".join(_fmt(r.get("webhook_p99_ms"))
                                                            for r in results["with webhook"]) + " ms")
    return 0


def _admitted(core: Any) -> bool:
    """Whether a pod created now comes back patched by the webhook (a dry run: nothing is stored)."""
    created = core.create_namespaced_pod(NAMESPACE, pod_body("probe"), dry_run="All")
    return bool(created.spec.scheduler_name == "gpu-scheduler")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    raise SystemExit(main())
