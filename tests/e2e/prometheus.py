"""A real Prometheus on loopback, scraping what the monitoring tests point it at.

The alerts and dashboards we ship are PromQL, so the tests run them on the real thing: the `prometheus` and
`promtool` that `hack/prometheus.sh build` puts in a cache directory, started like the control plane's components
(`controlplane.Process`, stopped by PID). Targets come from file_sd files, one per job, that `set_targets` rewrites
while Prometheus runs: a job's scheme and TLS settings are per scrape config, so the jobs are named up front
(`JOBS`), and changing one rewrites prometheus.yml and reloads it. Everything runs at a 1 s rhythm (scrape, rule
evaluation, file_sd refresh, the scrape manager's target updates) so that a test waits seconds, not minutes.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from tests.e2e import controlplane as cp

PROMETHEUS_VERSION = "v0.316.0"  # the Go module's version (Prometheus 3.16.0), as hack/prometheus.sh builds it
BINARIES = ("prometheus", "promtool")
MISSING = (
    "Prometheus binaries not built: run hack/prometheus.sh build, or hack/control-plane.sh build, which runs it "
    "(needs Go >= 1.26 and the Go module proxy; builds prometheus and promtool into ~/.cache/gpu-scheduler)"
)

Sample = tuple[dict[str, str], float]  # a series' labels and its value


TOOL = cp.CachedTool("GPU_SCHEDULER_PROMETHEUS_DIR", "prometheus", PROMETHEUS_VERSION, BINARIES,
                    "Prometheus tests", MISSING)  # CI must run the monitoring tests
find_binaries = TOOL.find
require_binaries = TOOL.require


def promtool_check_rules(path: Path | str, *, bin_dir: Path | None = None) -> tuple[int, str]:
    """`promtool check rules PATH`: its exit code and what it printed (stdout, then stderr)."""
    result = subprocess.run([str(TOOL.bin_dir(bin_dir) / "promtool"), "check", "rules", str(path)],
                            capture_output=True, text=True, timeout=60)
    return result.returncode, result.stdout + result.stderr


@dataclass(frozen=True)
class Job:
    """One scrape config; its targets come from the file_sd file `<targets dir>/<name>.json`."""

    name: str
    scheme: Literal["http", "https"] = "http"
    ca_file: str | None = None  # https: the CA that signed the targets' serving certificates
    insecure_skip_verify: bool = False  # https: accept any serving certificate
    metrics_path: str = "/metrics"


JOBS = (
    Job("dcgm-exporter"),  # tests/e2e/dcgm.py's stand-in
    Job("gpu-scheduler"),  # `gpu-scheduler run`'s metrics port
    Job("gpu-scheduler-webhook", scheme="https"),  # the webhook serves /metrics on its TLS port
)


class PrometheusError(RuntimeError):
    """The HTTP API answered with an error; the message carries its errorType and error."""


class Prometheus:
    """prometheus on 127.0.0.1 with its data in a temp dir; a context manager.

    `stop()` ends the process and keeps the data, so `start()` or `restart()` bring it back on the same port with
    the series it had; `close()` stops it and removes the temp dir.
    """

    def __init__(self, bin_dir: Path | None = None, *, jobs: Iterable[Job] = JOBS,
                 rule_files: Sequence[Path | str] = (), start_timeout: float = 60.0, scrape_interval: str = "1s",
                 scrape_timeout: str = "1s") -> None:
        self.bin_dir = TOOL.bin_dir(bin_dir)
        self.rule_files = [str(Path(path).resolve()) for path in rule_files]
        self.start_timeout = start_timeout
        self.scrape = {"scrape_interval": scrape_interval, "scrape_timeout": scrape_timeout}  # benchmarks: slower
        self.dir = Path(tempfile.mkdtemp(prefix="gpu-scheduler-prometheus-"))
        self.config_path = self.dir / "prometheus.yml"
        self.targets_dir = self.dir / "targets"
        self.targets_dir.mkdir()
        self.data_dir = self.dir / "data"
        self.port = 0
        self._jobs = {job.name: job for job in jobs}
        self._process: cp.Process | None = None
        for job in self._jobs.values():
            self._write_targets(job.name, [])
        self._write_config()
        atexit.register(self.close)

    def __enter__(self) -> Prometheus:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start on a free port (the first time) or on the port it had; returns once /-/ready answers 200."""
        if self.port:
            self._process = self._start(self.port)
        else:
            self._process = cp._start_with_retry("prometheus", lambda: self._start(cp.free_port()))

    def stop(self) -> None:
        """SIGTERM: Prometheus closes its TSDB (the WAL holds every sample it took) and exits; the data dir stays."""
        if self._process is not None:
            self._process.stop(timeout=30)
            self._process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        atexit.unregister(self.close)

    def alive(self) -> bool:
        return self._process is not None and self._process.alive()

    def logs_tail(self, n_lines: int = 50) -> str:
        """The end of its log, across restarts (each start appends its command line and output)."""
        try:
            lines = (self.dir / "prometheus.log").read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return ""
        return "\n".join(lines[-n_lines:])

    def _start(self, port: int) -> cp.Process:
        process = cp.Process(
            "prometheus",
            [
                str(self.bin_dir / "prometheus"),
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",  # POST /-/reload
                # The scrape manager takes target updates every 5 s by default (a hidden flag): 1 s, so a
                # target a test adds is scraped within about 2 s.
                "--scrape.discovery-reload-interval=1s",
            ],
            self.dir / "prometheus.log",
        )
        try:
            cp._wait_for("prometheus /-/ready", lambda: cp._http_ok(f"http://127.0.0.1:{port}/-/ready"), process,
                         self.start_timeout)
        except cp.StartError:
            process.stop()
            raise
        self.port = port
        return process

    # --- configuration ---------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def set_targets(self, job: str, targets: Sequence[str], *, labels: Mapping[str, str] | None = None,
                    scheme: Literal["http", "https"] | None = None, ca_file: Path | str | None = None,
                    insecure_skip_verify: bool | None = None) -> None:
        """Scrape `targets` ("host:port") in `job` from now on (none: stop scraping it), with `labels` on their
        series. A job not in the config yet, or a new scheme or TLS setting for one, rewrites prometheus.yml and
        reloads it; otherwise only the job's file_sd file changes, which Prometheus reads within 1 s."""
        current = self._jobs.get(job, Job(job))
        changes: dict[str, Any] = {}
        if scheme is not None:
            changes["scheme"] = scheme
        if ca_file is not None:
            changes["ca_file"] = str(Path(ca_file).resolve())
        if insecure_skip_verify is not None:
            changes["insecure_skip_verify"] = insecure_skip_verify
        wanted = dataclasses.replace(current, **changes)
        self._write_targets(job, targets, labels)
        if job not in self._jobs or wanted != current:
            self._jobs[job] = wanted
            self._write_config()
            if self.alive():
                self.reload()

    def reload(self) -> None:
        """POST /-/reload: Prometheus reads prometheus.yml and the rule files again; raises if it refuses them."""
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                response.read()
        except urllib.error.HTTPError as err:
            raise PrometheusError(f"reload refused ({err.code}): {err.read().decode(errors='replace')}") from err

    def _write_targets(self, job: str, targets: Sequence[str], labels: Mapping[str, str] | None = None) -> None:
        groups = [{"targets": list(targets), "labels": dict(labels or {})}] if targets else []
        path = self.targets_dir / f"{job}.json"
        partial = self.targets_dir / f".{job}.json.partial"  # file_sd must never read half a file
        partial.write_text(json.dumps(groups))
        os.replace(partial, path)

    def _write_config(self) -> None:
        scrape_configs = []
        for job in self._jobs.values():
            scrape: dict[str, Any] = {
                "job_name": job.name,
                "scheme": job.scheme,
                "metrics_path": job.metrics_path,
                "file_sd_configs": [{"files": [str(self.targets_dir / f"{job.name}.json")], "refresh_interval": "1s"}],
            }
            if job.scheme == "https":
                tls: dict[str, Any] = {"insecure_skip_verify": job.insecure_skip_verify}
                if job.ca_file:
                    tls["ca_file"] = job.ca_file
                scrape["tls_config"] = tls
            scrape_configs.append(scrape)
        config = {
            "global": {**self.scrape, "evaluation_interval": "1s"},
            "rule_files": self.rule_files,
            "scrape_configs": scrape_configs,
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    # --- HTTP API --------------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The API's JSON answer (status, data, warnings); an error answer raises PrometheusError."""
        url = f"{self.url}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as err:
            text = err.read().decode(errors="replace")
            try:
                error = json.loads(text)
                text = f"{error.get('errorType')}: {error.get('error')}"
            except ValueError:
                pass
            raise PrometheusError(f"GET {path} {dict(params or {})}: {err.code} {text}") from err
        if body.get("status") != "success":
            raise PrometheusError(f"GET {path} {dict(params or {})}: {body}")
        answer: dict[str, Any] = body
        return answer

    def query_raw(self, expr: str, *, at: float | None = None) -> dict[str, Any]:
        """GET /api/v1/query, an instant query now or `at` (epoch seconds): the whole answer ({"status":
        "success", "data": {"resultType": ..., "result": ...}} and any "warnings" or "infos")."""
        params = {"query": expr} if at is None else {"query": expr, "time": f"{at:.3f}"}
        return self._get("/api/v1/query", params)

    def query(self, expr: str, *, at: float | None = None) -> list[Sample]:
        """An instant query's series (now or `at`) as (labels, value); a scalar is one sample with no labels.
        "NaN" and "+Inf" come back as the floats they name."""
        data = self.query_raw(expr, at=at)["data"]
        kind, result = data["resultType"], data["result"]
        if kind == "vector":
            return [(dict(item["metric"]), float(item["value"][1])) for item in result]
        if kind == "scalar":
            return [({}, float(result[1]))]
        raise PrometheusError(f"query {expr!r} gave a {kind}, not a vector or scalar")

    def wait_for(self, expr: str, predicate: Callable[[list[Sample]], bool] = bool,
                 timeout: float = 15.0) -> list[Sample]:
        """Query `expr` until `predicate` holds for its samples (by default: until there are any); returns them.
        Raises TimeoutError with the last samples or error, and at once if Prometheus exits."""
        deadline = time.monotonic() + timeout
        last: object = "no answer yet"
        while True:
            if not self.alive():
                raise cp.StartError(f"prometheus is not running while waiting for {expr!r}:\n{self.logs_tail()}")
            try:
                samples = self.query(expr)
            except (PrometheusError, OSError) as err:
                last = err
            else:
                if predicate(samples):
                    return samples
                last = samples
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{expr!r} not as wanted after {timeout:.0f}s; last: {last}")
            time.sleep(0.2)

    def targets(self) -> list[dict[str, Any]]:
        """GET /api/v1/targets: the active targets (labels, scrapePool, health, lastError, ...)."""
        active: list[dict[str, Any]] = self._get("/api/v1/targets", {"state": "active"})["data"]["activeTargets"]
        return active
