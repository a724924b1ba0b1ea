"""Live GPU utilization from Prometheus: what one refresh costs, and whether the source slows scheduling.

refresh   A real Prometheus (hack/prometheus.sh) scrapes a dcgm-exporter stand-in serving --refresh-nodes (5000)
          x 8 GPUs in dcgm-exporter's text format (4 fields per GPU). Then the scheduler's refresh is timed
          --repeat times: the query (default: avg_over_time(DCGM_FI_DEV_GPU_UTIL[2m])) over HTTP and its JSON
          (gpu_scheduler.prometheus), reading it into readings (scheduler_core.utilization), and applying them to a
          model of those nodes (Cluster.set_live_utilization: what the scheduling loop itself pays). Also for the
          aggregated query the docs suggest for large clusters.
rate      One real control plane, --nodes (1000) x 8 GPUs and --pods one-GPU pods: `gpu-scheduler run` with the
          source off and on (refreshSeconds 15, the default, and 1; the default query; against a Prometheus
          scraping the stand-in for those nodes every 15 s), alternating over --rounds. Prometheus and the stand-in run in both, so the
          difference is the scheduler's own. Target: no measurable drop (on/off within the rounds' spread).

    python benchmarks/utilization.py [--part refresh|rate|both] [--refresh-nodes 5000] [--nodes 1000] [--pods 2000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import scheduler_e2e, sides  # noqa: E402
from gpu_scheduler import prometheus as client  # noqa: E402
from scheduler_core import cluster, nodes, profile, utilization  # noqa: E402
from tests import servers  # noqa: E402
from tests.e2e import controlplane as cp  # noqa: E402
from tests.e2e import prometheus as prom  # noqa: E402
from tests.e2e.dcgm import DcgmExporter  # noqa: E402

GPUS_PER_NODE = 8
EVERY_LABEL = "avg_over_time(DCGM_FI_DEV_GPU_UTIL[2m])"  # the same, with all of dcgm-exporter's labels


class StaticExporter:
    """The stand-in's text for every GPU, rendered once and served as it is: at 40,000 GPUs rendering per scrape
    would measure Python, not Prometheus."""

    def __init__(self, names: list[str]):
        exporter = DcgmExporter()
        for number, name in enumerate(names):
            for index in range(GPUS_PER_NODE):
                exporter.set_gpu(name, index, util=(number * 7 + index * 13) % 101)
        body = exporter.body().encode()
        self.size = len(body)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.address = f"127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()


def node_names(count: int) -> list[str]:
    return [f"bench-{i:05d}" for i in range(count)]


def started_prometheus(exporter: StaticExporter, series: int) -> prom.Prometheus:
    server = prom.Prometheus(jobs=[prom.Job("dcgm-exporter")], scrape_interval="15s", scrape_timeout="14s")
    server.start()
    server.set_targets("dcgm-exporter", [exporter.address])
    print(f"waiting for Prometheus to scrape {series} GPUs ...", file=sys.stderr, flush=True)
    server.wait_for("count(DCGM_FI_DEV_GPU_UTIL)", lambda s: bool(s) and s[0][1] >= series, timeout=120)
    return server


def model_of(names: list[str]) -> cluster.Cluster:
    model = cluster.Cluster()
    for name in names:
        model.set_node(nodes.parse({"metadata": {"name": name, "labels": {"gpu.nvidia.com/model": "A100"}},
                                    "status": {"allocatable": {"cpu": "64", "memory": "512Gi",
                                                               "nvidia.com/gpu": str(GPUS_PER_NODE)},
                                               "conditions": [{"type": "Ready", "status": "True"}]}}))
    return model


def refresh_part(args: argparse.Namespace) -> None:
    names = node_names(args.refresh_nodes)
    exporter = StaticExporter(names)
    series = len(names) * GPUS_PER_NODE
    server = started_prometheus(exporter, series)
    model = model_of(names)
    print(f"\nrefresh at {len(names)} nodes x {GPUS_PER_NODE} GPUs ({series} GPU series; the exporter's page "
          f"{exporter.size / 2**20:.1f} MiB); medians of {args.repeat}, milliseconds")
    print(f"{'query':<12}{'answer MiB':>11}{'query+JSON':>11}{'read':>7}{'apply':>7}{'total':>7}{'our CPU':>9}")
    try:
        for label, query in (("default", utilization.default_query()), ("all labels", EVERY_LABEL)):
            source = profile.PrometheusSource(url=server.url, query=query, timeout_seconds=30)
            asking = client.Client(source)
            timings: dict[str, list[float]] = {"query": [], "read": [], "apply": []}
            cpu: list[float] = []
            for _ in range(args.repeat):
                started, cpu_started = time.perf_counter(), time.process_time()
                answer = asking.query(query)
                asked = time.perf_counter()
                readings = utilization.read(utilization.vector_of(answer), mapping=source.mapping())
                read = time.perf_counter()
                model.set_live_utilization(readings)
                applied = time.perf_counter()
                cpu.append(time.process_time() - cpu_started)
                timings["query"].append(asked - started)
                timings["read"].append(read - asked)
                timings["apply"].append(applied - read)
                assert len(readings.nodes) == len(names), f"{len(readings.nodes)} nodes read"
            with urllib.request.urlopen(f"{server.url}/api/v1/query?{urllib.parse.urlencode({'query': query})}",
                                        timeout=60) as response:
                size = len(response.read())
            median = {key: statistics.median(values) * 1000 for key, values in timings.items()}
            print(f"{label:<12}{size / 2**20:>11.1f}{median['query']:>11.0f}{median['read']:>7.0f}"
                  f"{median['apply']:>7.1f}{sum(median.values()):>7.0f}{statistics.median(cpu) * 1000:>9.0f}")
        print(f"default: {utilization.default_query()}; all labels: {EVERY_LABEL}")
        print("query+JSON and read run on the source's own thread; apply runs in the scheduling loop; our CPU: "
              "this process's CPU time for the three (query+JSON also holds Prometheus' own time)")
    finally:
        server.close()
        exporter.close()


def rate_part(args: argparse.Namespace) -> None:
    if cp.find_binaries() is None:
        raise SystemExit("control-plane binaries missing: run hack/control-plane.sh build")
    names = node_names(args.nodes)
    exporter = StaticExporter(names)
    server = started_prometheus(exporter, len(names) * GPUS_PER_NODE)
    work = Path(tempfile.mkdtemp(prefix="utilization-bench-"))
    configs: dict[str, Any] = {"off": {"schedulerName": "gpu-scheduler"}}
    for seconds in args.refresh_seconds:
        configs[f"on-{seconds:g}s"] = {"schedulerName": "gpu-scheduler", "scheduling": {"utilization": {"prometheus": {
            "url": server.url, "refreshSeconds": seconds, "maxAgeSeconds": max(60, 4 * seconds),
            "timeoutSeconds": 10}}}}
    for way, config in configs.items():
        (work / f"{way}.yaml").write_text(yaml.safe_dump(config))
    results: dict[str, list[float]] = {way: [] for way in configs}
    try:
        with cp.ControlPlane() as plane:
            api = plane.api_client()
            print(f"creating {args.nodes} nodes ...", file=sys.stderr, flush=True)
            scheduler_e2e.create_nodes(api, args.nodes)

            def runner(way: str) -> Any:
                def start() -> Any:
                    process = subprocess.Popen(
                        [sys.executable, "-m", "gpu_scheduler", "run", "--config", str(work / f"{way}.yaml"),
                         "--kubeconfig", str(plane.kubeconfig), "--port", str(servers.free_port()),
                         "--log-level", "warning"], stdout=(work / f"{way}.log").open("ab"), stderr=subprocess.STDOUT)
                    return lambda: servers.stop_process(process)
                return start

            ways = list(configs)
            for round_number in range(1, args.rounds + 1):
                # alternate the order, so no way always runs first (a cold cache) or last
                for way in ways if round_number % 2 else ways[::-1]:
                    outcome = scheduler_e2e.run_way(f"{way}-r{round_number}", plane, api, args.pods, work,
                                                    runner(way), "gpu-scheduler", args.timeout)
                    results[way].append(outcome["pods_per_s"])
                print(f"round {round_number}: " + ", ".join(f"{way} {rates[-1]:.0f}" for way, rates in results.items())
                      + " pods/s; " + ", ".join(f"{way}/off {rates[-1] / results['off'][-1]:.2f}"
                                               for way, rates in results.items() if way != "off"), flush=True)
    finally:
        server.close()
        exporter.close()
    print(f"\n{args.nodes} nodes x {GPUS_PER_NODE} GPUs, {args.pods} one-GPU pods, gpu-scheduler run, the default "
          f"query; medians of {args.rounds} rounds, the ways alternating in order")
    print(f"{'way':<10}{'pods/s':>8}   x off, per round")
    for way, rates in results.items():
        ratios = [rate / off for rate, off in zip(rates, results["off"])]
        print(f"{way:<10}{statistics.median(rates):>8.0f}   " + ("" if way == "off" else
              f"median {statistics.median(ratios):.2f}; rounds " + " ".join(f"{ratio:.2f}" for ratio in ratios)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("refresh", "rate", "both"), default="both")
    parser.add_argument("--refresh-nodes", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--refresh-seconds", type=lambda text: [float(v) for v in text.split(",")], default=[15.0, 1.0],
                        help="the source's refreshSeconds for each `on` way (default 15,1: the shipped default and "
                             "the most a config would ask)")
    parser.add_argument("--timeout", type=float, default=600.0, help="per way, seconds")
    args = parser.parse_args()
    sides.stop_cleanly_on_sigterm()
    if prom.find_binaries() is None:
        print(prom.MISSING, file=sys.stderr)
        return 2
    if args.part in ("refresh", "both"):
        refresh_part(args)
    if args.part in ("rate", "both"):
        rate_part(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
