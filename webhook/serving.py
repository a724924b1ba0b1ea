"""Running the app under gunicorn with TLS, the way it runs in production.

gthread workers keep TLS connections alive between admission calls (sync workers close
them, paying a handshake per request); webhook.workers keeps idle connections off threads.
The worker app is built after fork so each worker owns its watches. TLS 1.2 is the floor. Without a
certificate the server speaks plain HTTP: kube-scheduler may call an extender over http
(`enableHTTPS: false`), the webhook never.
"""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import ssl
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerOptions:
    cert_file: str | None = None  # None (with key_file None): plain HTTP
    key_file: str | None = None
    host: str = "0.0.0.0"
    port: int = 8443
    workers: int = 2
    threads: int = 4
    keepalive_seconds: int = 75  # longer than Go's idle connection reuse wants to wait
    log_level: str = "info"
    access_log: bool = False
    proc_name: str = "gpu-scheduler-webhook"
    # the extender's client (kube-scheduler) sends call after call on one connection: LingeringThreadWorker
    worker_class: str = "webhook.workers.IdleTolerantThreadWorker"


class ServingCertificate:
    """gunicorn's TLS context hook: a context per certificate version, not per connection.

    gunicorn asks for a context for every accepted connection, which would parse the key each
    time; this one is rebuilt only when the files change, which is also how a renewed Secret
    reaches new connections without a restart. The kubelet swaps a Secret volume atomically, yet
    a reader can still open tls.crt of one version and tls.key of the next: a pair that does not
    load leaves the previous context serving (still valid: renewal is weeks early, and a rotated
    CA stays trusted for a grace period), and the next connection tries again.
    """

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._stamp: tuple[tuple[int, ...], ...] | None = None
        self._lock = threading.Lock()

    def __call__(self, conf: Any, default_factory: Callable[[], ssl.SSLContext]) -> ssl.SSLContext:
        stamp = _stamp(conf.certfile), _stamp(conf.keyfile)
        with self._lock:
            if self._context is not None and stamp == self._stamp:
                return self._context
            try:
                context = default_factory()
            except (ssl.SSLError, OSError, ValueError) as err:
                if self._context is None:
                    raise
                log.warning("serving certificate %s with key %s does not load (%s): new connections keep the "
                            "previous certificate until it does", conf.certfile, conf.keyfile, err)
                return self._context
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            self._context, self._stamp = context, stamp
            _record_expiry(conf.certfile)
            return context


def _load_certificate(worker: Any) -> None:
    """Every worker holds a good context before its first connection, to fall back on later."""
    from gunicorn import sock

    sock.ssl_context(worker.cfg)


def _load_certificate_before_workers(arbiter: Any) -> None:
    """The master loads the pair once, before any worker forks, and every worker inherits that context: a worker
    (re)started while the files are mid-swap then keeps serving with it instead of failing to boot, which would
    make gunicorn stop the whole server (seen when a swap landed between a worker's start and its first load)."""
    from gunicorn import sock

    try:
        sock.ssl_context(arbiter.cfg)
    except (ssl.SSLError, OSError, ValueError) as err:
        log.error("serving certificate %s with key %s does not load: %s", arbiter.cfg.certfile, arbiter.cfg.keyfile,
                  err)
        raise SystemExit(2) from err


def _record_expiry(path: str) -> None:
    """The certificate's end of validity, for the alert that fires before it. (webhook.metrics is imported here:
    at the top it would create the metrics before `serve` chooses the multiprocess mode.)"""
    from cryptography import x509

    from webhook import metrics

    try:
        certificate = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError):
        return  # it loaded a moment ago: swapped meanwhile; the next context records it
    metrics.SERVING_CERTIFICATE_EXPIRY.set(certificate.not_valid_after_utc.timestamp())


def _stamp(path: str) -> tuple[int, ...]:
    try:
        found = os.stat(path)  # follows the kubelet's ..data symlinks to the current version
    except OSError:
        return ()
    return found.st_dev, found.st_ino, found.st_mtime_ns, found.st_size


def _child_exit(_: Any, worker: Any) -> None:
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


class _Server(BaseApplication):
    def __init__(self, load_app: Callable[[], Any], options: dict[str, Any]):
        self._load_app = load_app
        self._options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self._options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        return self._load_app()


def serve(load_app: Callable[[], Any], options: ServerOptions, *, preload: tuple[str, ...] = ()) -> None:
    """Run gunicorn until it is told to stop (SIGTERM: graceful).

    `preload` modules are imported in the master, after the metrics mode is set and before
    workers fork, so a worker (re)starts in milliseconds instead of re-importing them.
    """
    metrics_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    own_metrics_dir = None
    if not metrics_dir:
        own_metrics_dir = metrics_dir = tempfile.mkdtemp(prefix="gpu-scheduler-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    for module in preload:
        importlib.import_module(module)
    gunicorn_options = {
        "bind": [f"[{options.host}]:{options.port}" if ":" in options.host else f"{options.host}:{options.port}"],
        "workers": options.workers,
        "worker_class": options.worker_class,
        "threads": options.threads,
        "keepalive": options.keepalive_seconds,
        "child_exit": _child_exit,
        "timeout": 30,
        "graceful_timeout": 10,
        "loglevel": options.log_level,
        "accesslog": "-" if options.access_log else None,
        "errorlog": "-",
        "worker_tmp_dir": "/dev/shm" if os.path.isdir("/dev/shm") else None,
        "proc_name": options.proc_name,
        "control_socket_disable": True,  # several servers may share a host (and /root)
    }
    if options.cert_file is not None or options.key_file is not None:
        if options.cert_file is None or options.key_file is None:
            raise ValueError("cert_file and key_file go together: both for TLS, neither for plain HTTP")
        gunicorn_options.update(certfile=options.cert_file, keyfile=options.key_file, ssl_context=ServingCertificate(),
                                when_ready=_load_certificate_before_workers, post_worker_init=_load_certificate)
    try:
        _Server(load_app, gunicorn_options).run()
    finally:
        if own_metrics_dir:
            shutil.rmtree(own_metrics_dir, ignore_errors=True)
