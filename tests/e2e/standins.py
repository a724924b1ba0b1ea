"""Stand-ins for the parts of a cluster the test control plane runs without (a kubelet, a CSI provisioner, a DRA
driver): each polls the API on a thread of its own and does that part's job, an API error skipping one round; a DRA
driver's part here is what it publishes."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes.client.exceptions import ApiException


class Poller:
    """`poll()` every `interval` seconds on a daemon thread from `start()` until `stop()`."""

    name = "e2e-poller"
    interval = 0.2

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=self.name)

    def start(self) -> Poller:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(5)

    def poll(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.poll()
            except ApiException:
                continue


DRA_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver, kubernetes-sigs/dra-driver-nvidia-gpu


def gpu_slice(node: str, *, product: str = "NVIDIA A100-SXM4-40GB", memory: str = "40Gi", count: int = 8,
              tainted: tuple[int, ...] = ()) -> dict[str, Any]:
    """A node's ResourceSlice as NVIDIA's DRA driver publishes it (one per node, pool = the node): two PCIe roots
    of four GPUs each; `tainted` GPUs carry the taint the driver sets after a fatal XID error."""
    devices = []
    for index in range(count):
        device: dict[str, Any] = {
            "name": f"gpu-{index}",
            "attributes": {
                "type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{index}"},
                "productName": {"string": product}, "brand": {"string": "Nvidia"},
                "architecture": {"string": "Ampere" if "A100" in product else "Hopper"},
                "cudaComputeCapability": {"version": "8.0.0" if "A100" in product else "9.0.0"},
                "driverVersion": {"version": "580.65.6"},
                "resource.kubernetes.io/pciBusID": {"string": f"0000:{index + 16:02x}:00.0"},
                "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{index // 4:02x}"}},
            "capacity": {"memory": {"value": memory}}}
        if index in tainted:
            device["taints"] = [{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]
        devices.append(device)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRA_DRIVER}"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}}
