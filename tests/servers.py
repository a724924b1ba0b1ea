"""Starting the real `gpu-scheduler webhook` (gunicorn, TLS) for tests, as a user would."""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def generate_certs(out: Path) -> Path:
    """`gpu-scheduler certs generate` for a loopback webhook; returns the directory."""
    subprocess.run(
        [sys.executable, "-m", "gpu_scheduler", "certs", "generate", "--service", "gpu-scheduler-webhook",
         "--namespace", "gpu-scheduler", "--out", str(out), "--ip", "127.0.0.1"],
        check=True, capture_output=True,
    )
    return out


@dataclass
class Webhook:
    """A running webhook process and how to reach it."""

    process: subprocess.Popen[bytes]
    port: int
    certs: Path
    log: Path
    check_hostname: bool = True  # False for a certificate issued to a Service's DNS names, not to 127.0.0.1
    context: ssl.SSLContext = field(init=False)

    def __post_init__(self) -> None:
        self.context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        self.context.check_hostname = self.check_hostname

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def connection(self, timeout: float = 10) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=timeout)

    def request(self, method: str, path: str, body: bytes | None = None,
                conn: http.client.HTTPSConnection | None = None) -> tuple[int, bytes]:
        own = conn is None
        conn = conn or self.connection()
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            if own:
                conn.close()

    def post_review(self, review: dict[str, Any], conn: http.client.HTTPSConnection | None = None
                    ) -> dict[str, Any]:
        status, body = self.request("POST", "/mutate", json.dumps(review).encode(), conn)
        assert status == 200, body
        return json.loads(body)

    def logs(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        stop_process(self.process)


def stop_process(process: subprocess.Popen[bytes], *, kill: bool = False) -> None:
    """SIGTERM (or SIGKILL), then SIGKILL if it has not exited within 15 s."""
    if process.poll() is not None:
        return
    if kill:
        process.kill()
    else:
        process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def start_webhook(
    certs: Path,
    log_dir: Path,
    *source_args: str,
    workers: int = 2,
    ready: bool = True,
    env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    port: int | None = None,
    host: str = "127.0.0.1",
    check_hostname: bool = True,
) -> Webhook:
    """Start `gpu-scheduler webhook` on `host`:`port` (default: a free loopback port; a host other than 127.0.0.1
    must also serve loopback, e.g. 0.0.0.0); wait for /healthz (and, when `ready`, until every worker has loaded a
    config)."""
    fixed = port
    for _ in range(5):  # another process may take the port between our probe and gunicorn's bind
        port = fixed or free_port()
        log = log_dir / f"webhook-{port}.log"
        process = subprocess.Popen(
            [sys.executable, "-m", "gpu_scheduler", "webhook", *source_args,
             "--cert", str(certs / "tls.crt"), "--key", str(certs / "tls.key"),
             "--host", host, "--port", str(port), "--workers", str(workers), *extra_args],
            stdout=log.open("wb"), stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
        server = Webhook(process, port, certs, log, check_hostname)
        if _wait_serving(server, ready, workers):
            return server
        server.stop()
        if "Address already in use" not in server.logs():
            raise RuntimeError(f"webhook did not start:\n{server.logs()}")
    raise RuntimeError("webhook could not bind a free port")


def _wait_serving(server: Webhook, ready: bool, workers: int, timeout: float = 30) -> bool:
    """Wait for /healthz; when `ready`, until every worker has loaded a config (the metric sums them)."""
    deadline = time.monotonic() + timeout
    loaded = f"gpu_scheduler_config_reloads_total {float(workers)}"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            status, body = server.request("GET", "/metrics" if ready else "/healthz")
            if status == 200 and (not ready or loaded in body.decode()):
                return True
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(0.1)
    return False


def eventually(check: Any, timeout: float = 10, interval: float = 0.1) -> Any:
    """Poll `check()` until it returns something truthy; fail with its last answer at the deadline."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s; last result: {last!r}")
