"""`gpu-scheduler run`: configuration, health and metrics endpoints, leader election, the loop.

With `--leader-elect` the instance schedules only while it holds a coordination.k8s.io
Lease (the kubernetes client's LeaderElection, the well-kept implementation); losing the
lease ends the process, as kube-scheduler does, so two instances never bind at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from gpu_scheduler import sources, watching
from gpu_scheduler.runtime import metrics, model_metrics, running
from webhook import reloading

log = logging.getLogger(__name__)


def serve_health(port: int, state: dict[str, Any]) -> ThreadingHTTPServer:
    """`/healthz` (200 while standing by, or while the loop runs and no watch has been down over a minute; with
    `?verbose`, each check on a line of its own, as kube-scheduler's) and `/metrics`."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            path, _, query = self.path.partition("?")
            if path == "/metrics":
                body, kind, code = generate_latest(), CONTENT_TYPE_LATEST, 200
            elif path == "/healthz":
                problems = _health_problems(state.get("scheduler"))
                body = "; ".join(problems).encode() if problems else b"ok"
                if "verbose" in query.split("&"):
                    body = _health_detail(state.get("scheduler"), problems).encode()
                kind, code = "text/plain", 500 if problems else 200
            else:
                body, kind, code = b"not found", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server


def _health_problems(scheduler: running.LiveScheduler | None) -> list[str]:
    if scheduler is None:
        return []  # standing by for the lease, or waiting for a valid configuration
    problems = [] if scheduler._loop.is_alive() else ["scheduling loop stopped"]
    return problems + scheduler.watches.down()


def _health_detail(scheduler: running.LiveScheduler | None, problems: list[str]) -> str:
    """Each check on a line (`[+]name ok` or `[-]name failed: why`), then the verdict. The live utilization source
    is shown but never fails the check: without it the scheduler still schedules, scoring neutral."""
    if scheduler is None:
        return "[+]standing-by ok: waiting for the leader lease or a valid configuration\nhealthz check passed\n"
    lines = [f"[-]{problem}" for problem in problems] or ["[+]scheduling-loop ok", "[+]watches ok"]
    lines += [f"[+]{plugin.name} ok: {line}" for plugin in scheduler.plugins if (line := plugin.health()) is not None]
    lines.append("healthz check failed" if problems else "healthz check passed")
    return "\n".join(lines) + "\n"


def run(api: client.ApiClient, *, config_file: Path | None, config_map: tuple[str, str] | None,
        leader_elect: bool, lease: tuple[str, str], port: int, binder_threads: int = 32) -> int:
    state: dict[str, Any] = {}
    model_metrics.register(lambda: model_metrics.ModelView.of(state["scheduler"].model) if "scheduler" in state
                           else None)
    REGISTRY.register(watching.DownCollector(lambda: state["scheduler"].watches if "scheduler" in state else None))
    serve_health(port, state)

    def on_change(settings: Any) -> None:
        scheduler = state.get("scheduler")
        if scheduler is not None:
            scheduler.configure(settings)

    holder = reloading.ConfigHolder(on_change=on_change)
    sources.start(holder, config_file=config_file, config_map=config_map, core_api=client.CoreV1Api(api))

    done = threading.Event()

    def lead() -> None:
        while holder.current is None and not done.is_set():
            log.info("waiting for a valid configuration")
            done.wait(1.0)
        settings = holder.current
        assert settings is not None
        scheduler = running.LiveScheduler(api, settings, binder_threads=binder_threads)
        state["scheduler"] = scheduler
        scheduler.start()
        metrics.LEADER.set(1)
        log.info("scheduling pods with schedulerName %s", settings.scheduler_name)

    if not leader_elect:
        lead()
        done.wait()
        return 0

    identity = f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    lock = LeaseLock(lease[1], lease[0], identity)
    lock.api_instance = client.CoordinationV1Api(api)

    def lost() -> None:
        metrics.LEADER.set(0)
        log.error("lost the leader lease %s/%s; exiting so a standby takes over", *lease)
        logging.shutdown()
        os._exit(1)

    election = leaderelection.LeaderElection(electionconfig.Config(
        lock, lease_duration=15, renew_deadline=10, retry_period=2, onstarted_leading=lead, onstopped_leading=lost))
    log.info("%s: standing by for the leader lease %s/%s", identity, *lease)
    metrics.LEADER.set(0)
    election.run()
    lost()
    return 1
