"""Running `gpu-scheduler run` against the test control plane, and checks from API objects alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests import servers


@dataclass
class SchedulerProcess:
    process: subprocess.Popen[bytes]
    log: Path
    port: int

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, kill: bool = False) -> None:
        servers.stop_process(self.process, kill=kill)


def start_scheduler(kubeconfig: Path, log_dir: Path, *args: str, name: str = "scheduler") -> SchedulerProcess:
    port = servers.free_port()
    log = log_dir / f"{name}-{port}.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "gpu_scheduler", "run", "--kubeconfig", str(kubeconfig), "--port", str(port), *args],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, env=os.environ.copy(),
    )
    return SchedulerProcess(process, log, port)


def overcommit_problems(core: Any) -> list[str]:
    """Every bound pod's GPUs and devices against its node, from the API objects alone."""
    problems = []
    allocatable = {n.metadata.name: int((n.status.allocatable or {}).get("nvidia.com/gpu", "0"))
                   for n in core.list_node().items}
    whole: defaultdict[str, int] = defaultdict(int)
    device_milli: defaultdict[tuple[str, int], int] = defaultdict(int)
    for pod in core.list_pod_for_all_namespaces().items:
        node = pod.spec.node_name
        if not node or pod.status.phase in ("Succeeded", "Failed"):
            continue
        gpus = sum(int(((c.resources.limits if c.resources else None) or {}).get("nvidia.com/gpu", "0"))
                   for c in pod.spec.containers)
        whole[node] += gpus
        text = (pod.metadata.annotations or {}).get("gpu-scheduler.io/gpu-devices")
        if text:
            for device in json.loads(text):
                if device["index"] >= allocatable[node]:
                    problems.append(f"{pod.metadata.name}: GPU {device['index']} does not exist on {node}")
                device_milli[(node, device["index"])] += device.get("milli", 1000)
    for node, used in whole.items():
        if used > allocatable.get(node, 0):
            problems.append(f"{node}: {used} GPUs bound, {allocatable.get(node, 0)} allocatable")
    for (node, index), milli in device_milli.items():
        if milli > 1000:
            problems.append(f"{node} GPU {index}: {milli}/1000 given out")
    return problems
