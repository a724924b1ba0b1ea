"""What the benchmarks share: starting `gpu-scheduler run` as a subprocess and the per-round a/b ratios (for those
that race it against kube-scheduler on one control plane), the number format of their tables, the CPU steal printed
beside their figures, and stopping what they started when they are told to stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import servers  # noqa: E402


def stop_cleanly_on_sigterm() -> None:
    """Let SIGTERM end a benchmark as Ctrl-C does, through its `finally` and `with` blocks: the servers and the
    control plane it started run in sessions of their own, and would otherwise be left running."""
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))


def start_run(kubeconfig: Path, config_file: Path, log_path: Path, *, nodes: int = 0) -> Callable[[], None]:
    """`gpu-scheduler run` against `kubeconfig`, logging to `log_path`; with `nodes`, returns once its model holds
    that many GPU nodes (as kube-scheduler's start waits for its informers). Returns how to stop it."""
    log = log_path.open("ab")
    port = servers.free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gpu_scheduler", "run", "--config", str(config_file), "--kubeconfig", str(kubeconfig),
         "--port", str(port), "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))})

    def stop() -> None:
        servers.stop_process(process)
        log.close()
    if nodes:
        servers.eventually(lambda: _nodes_in_model(port) >= nodes, timeout=120)
    return stop


def _nodes_in_model(port: int) -> int:
    """Nodes with GPUs in a running `gpu-scheduler run`'s model, from its /metrics (0 until it answers)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return 0
    return sum(1 for line in text.splitlines() if line.startswith("gpu_scheduler_allocated_gpus{"))


def ratios(results: dict[str, list[dict[str, Any]]], only_round: int = 0) -> list[float]:
    """Ours over kube-scheduler's rate, round by round (rounds where both finished); or that of one round."""
    pairs = list(zip(results.get("gpu-scheduler", []), results.get("kube-scheduler", [])))
    if only_round:
        pairs = pairs[only_round - 1:only_round]
    return [a["pods_per_s"] / b["pods_per_s"] for a, b in pairs if a["completed"] and b["completed"]]


def fmt(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


class CpuSteal:
    """The share of this VM's CPU time the hypervisor gave to other guests while a measurement ran (`steal` in
    /proc/stat). On a shared host it comes in bursts, and a run that lost several percent to it measures the
    neighbours as much as the servers: the benchmarks print it beside their figures. None where it is not known."""

    def __init__(self) -> None:
        self._start = _cpu_times()

    def share(self) -> float | None:
        end = _cpu_times()
        if self._start is None or end is None:
            return None
        total = sum(end) - sum(self._start)
        return (end[7] - self._start[7]) / total if total > 0 else None


def _cpu_times() -> list[int] | None:
    """user nice system idle iowait irq softirq steal, in clock ticks summed over the CPUs; None off Linux."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return None
    if fields[:1] != ["cpu"] or len(fields) < 9:
        return None
    return [int(value) for value in fields[1:9]]
