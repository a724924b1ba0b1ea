"""A stand-in for NVIDIA's dcgm-exporter, the only fake of the monitoring tests: there are no GPUs here.

It serves GET /metrics in dcgm-exporter's own text, as release 4.5.3-4.8.2 (NVIDIA/dcgm-exporter) writes it: its
template (`internal/pkg/rendermetrics/render_metrics.go`, `gpuMetricsFormat`) prints, for each counter of
`etc/default-counters.csv` that has values, `# HELP` with the CSV's help text and `# TYPE`, then one line per GPU
with the labels in this order: `gpu`, `UUID`, `pci_bus_id`, `device` (nvidia<index>), `modelName`, `Hostname`, then
the label fields (`DCGM_FI_DRIVER_VERSION`) and, with pod mapping (`internal/pkg/transformation/kubernetes.go`),
`container`, `namespace` and `pod`, each group sorted by name as Go's template ranges over a map. Values print as
`toString` in `internal/pkg/collector/gpu_collector.go` formats them: `%d` for DCGM's integer fields (all four here),
`%f` for its float ones; a blank DCGM value (a field the GPU does not report) leaves the line out. The handler sets
no Content-Type, so Go's server sends `text/plain; charset=utf-8`, which Prometheus reads as its text format.

Unreleased upstream (commit d5e5f51, after 4.5.3-4.8.2) renames `Hostname` to `hostname`: `hostname_label` serves
either. dcgm-exporter fills it from NODE_NAME, so it is the node's name. One stand-in may serve many nodes' GPUs, as
if a DaemonSet's pods were one target; `Hostname` tells them apart in queries, as it does in a real cluster.
"""

from __future__ import annotations

import math
import threading
import uuid as uuids
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

# A value as the stand-in is told it: a number is formatted as dcgm-exporter formats its field; a str is served
# verbatim (odd values such as "NaN", "-5", "1e9"); None is DCGM's blank, which leaves the line out.
Value = int | float | str | None

A100 = "NVIDIA A100-SXM4-40GB"
DRIVER_VERSION = "580.65.06"
_UUID_NAMESPACE = uuids.UUID("6b1f5b8e-2f0c-4a53-9a57-2c2f4e7d9a10")  # UUIDs derived from (hostname, index)


@dataclass(frozen=True)
class Field:
    """A DCGM field as etc/default-counters.csv lists it, with the type DCGM gives its values."""

    name: str
    prom_type: str
    help: str
    integer: bool  # DCGM_FT_INT64, printed with %d; otherwise DCGM_FT_DOUBLE, printed with %f


# In the CSV's order (dcgm-exporter's own order is that of a Go map: any).
FIELDS = (
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", integer=True),
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", integer=True),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", integer=True),
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", integer=True),
)


class Pod(NamedTuple):
    """The pod a GPU is assigned to, as dcgm-exporter's pod mapping (kubelet's pod-resources API) names it."""

    namespace: str
    name: str
    container: str


@dataclass(frozen=True)
class GPU:
    """One GPU of one node and the values its fields report."""

    hostname: str
    index: int
    uuid: str
    model: str
    pci_bus_id: str
    driver_version: str
    values: dict[str, Value] = field(default_factory=dict)  # field name -> value; a field not here is blank
    pod: Pod | None = None


def derived_uuid(hostname: str, index: int) -> str:
    """A GPU UUID in NVIDIA's spelling ("GPU-" and a UUID), the same for the same node and index."""
    return f"GPU-{uuids.uuid5(_UUID_NAMESPACE, f'{hostname}/{index}')}"


def format_value(dcgm_field: Field, value: Value) -> str | None:
    """The value as dcgm-exporter prints it, None for a blank (no line)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")  # Go's spelling
    return f"{int(value):d}" if dcgm_field.integer else f"{float(value):f}"


def _labels(gpu: GPU, hostname_label: str) -> str:
    pairs = [("gpu", str(gpu.index)), ("UUID", gpu.uuid), ("pci_bus_id", gpu.pci_bus_id),
             ("device", f"nvidia{gpu.index}"), ("modelName", gpu.model)]
    if gpu.hostname:
        pairs.append((hostname_label, gpu.hostname))
    pairs.append(("DCGM_FI_DRIVER_VERSION", gpu.driver_version))
    if gpu.pod is not None:
        pairs += sorted({"container": gpu.pod.container, "namespace": gpu.pod.namespace, "pod": gpu.pod.name}.items())
    return ",".join(f'{name}="{value}"' for name, value in pairs)  # unescaped, as the Go template writes them


def render(gpus: Iterable[GPU], *, hostname_label: str = "Hostname") -> str:
    """The body of dcgm-exporter's /metrics for these GPUs (ordered by node, then index, as on each node)."""
    ordered = sorted(gpus, key=lambda gpu: (gpu.hostname, gpu.index))
    blocks = []
    for dcgm_field in FIELDS:
        lines = []
        for gpu in ordered:
            text = format_value(dcgm_field, gpu.values.get(dcgm_field.name))
            if text is not None:
                lines.append(f"{dcgm_field.name}{{{_labels(gpu, hostname_label)}}} {text}\n")
        if lines:
            blocks.append(f"# HELP {dcgm_field.name} {dcgm_field.help}\n")
            blocks.append(f"# TYPE {dcgm_field.name} {dcgm_field.prom_type}\n")
            blocks += lines
    return "".join(blocks)


class DcgmExporter:
    """dcgm-exporter's /metrics on 127.0.0.1 (a port of its own), from GPUs the test sets; thread-safe."""

    def __init__(self, *, hostname_label: str = "Hostname") -> None:
        self.hostname_label = hostname_label
        self._gpus: dict[tuple[str, int], GPU] = {}
        self._lock = threading.Lock()
        self._scrapes = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> DcgmExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> DcgmExporter:
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                body = exporter.body().encode()
                with exporter._lock:
                    exporter._scrapes += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("X-Content-Type-Options", "nosniff")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="dcgm-exporter")  # a short poll: a quick stop()
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    @property
    def address(self) -> str:
        """"127.0.0.1:<port>", a scrape target."""
        if self._server is None:
            raise RuntimeError("the dcgm-exporter stand-in is not started")
        return f"127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        """The URL of its /metrics."""
        return f"http://{self.address}/metrics"

    @property
    def scrapes(self) -> int:
        """How many times /metrics was served."""
        with self._lock:
            return self._scrapes

    def set_gpu(self, hostname: str, index: int, *, util: Value = 0, fb_used: Value = 0, fb_free: Value = 40960,
                sm_clock: Value = 1410, model: str = A100, uuid: str | None = None,
                driver_version: str = DRIVER_VERSION, pod: Pod | None = None) -> GPU:
        """Add or replace GPU `index` of node `hostname`, with every value given (defaults: an idle A100-40GB
        at its boost clock); `uuid` defaults to one derived from node and index, `pod` is the assigned pod."""
        gpu = GPU(hostname=hostname, index=index, uuid=uuid or derived_uuid(hostname, index), model=model,
                  pci_bus_id=f"00000000:{(0x07 + 8 * index) % 256:02X}:00.0", driver_version=driver_version,
                  values={"DCGM_FI_DEV_GPU_UTIL": util, "DCGM_FI_DEV_FB_USED": fb_used,
                          "DCGM_FI_DEV_FB_FREE": fb_free, "DCGM_FI_DEV_SM_CLOCK": sm_clock},
                  pod=pod)
        with self._lock:
            self._gpus[(hostname, index)] = gpu
        return gpu

    def remove_gpu(self, hostname: str, index: int) -> None:
        with self._lock:
            self._gpus.pop((hostname, index), None)

    def remove_node(self, hostname: str) -> None:
        """Serve none of this node's GPUs any more (its exporter is gone)."""
        with self._lock:
            for key in [key for key in self._gpus if key[0] == hostname]:
                del self._gpus[key]

    def gpus(self) -> list[GPU]:
        with self._lock:
            return list(self._gpus.values())

    def body(self) -> str:
        """What GET /metrics serves now."""
        return render(self.gpus(), hostname_label=self.hostname_label)
