"""A gthread worker that does not let idle TLS connections hold its threads.

gunicorn's gthread worker hands a new connection to a pool thread, which completes the TLS
handshake and then blocks reading the first request. Go's http.Transport, which the
apiserver uses to call webhooks, dials spare connections under load: they finish the
handshake and then sit idle in its pool. A handful of those blocks every thread of a
worker and stalls all admission calls until the webhook timeout (seen in the e2e burst,
and reproducible with 8 idle TLS sockets). Here, after the handshake, a connection whose
first request has not arrived goes back to the worker's poller instead of holding a thread.
"""

from __future__ import annotations

import selectors
import ssl
from typing import Any

from gunicorn.workers import gthread

# How long a pool thread waits for the request right after the handshake before deferring.
_REQUEST_GRACE_SECONDS = 0.005


class IdleTolerantThreadWorker(gthread.ThreadWorker):
    def handle(self, conn: Any) -> Any:
        if self.cfg.is_ssl and not conn.initialized and not conn.data_ready:
            if not conn.wait_for_data(gthread.DEFAULT_WORKER_DATA_TIMEOUT):
                return gthread._DEFER
            try:
                conn.sock.setblocking(True)
                conn.init()
            except (ssl.SSLError, OSError) as err:
                self.log.debug("TLS handshake with %s failed: %s", conn.client, err)
                return False
            if not _request_arrived(conn.sock):
                return gthread._DEFER
            conn.data_ready = True
        return super().handle(conn)


class LingeringThreadWorker(IdleTolerantThreadWorker):
    """For a client that sends its next request right after the answer, on the same connection.

    kube-scheduler calls an extender's /filter and then /prioritize for each pod, one after the
    other, on the connection it used last. The gthread worker returns a kept-alive connection to
    its poller after each answer, and the next request then waits for the poller thread and a
    pool thread to wake in turn: on a busy node that is most of a call's latency. Here the thread
    that answered keeps the connection for a few milliseconds and serves what arrives meanwhile.
    """

    linger_seconds = 0.01

    def handle(self, conn: Any) -> Any:
        keepalive = super().handle(conn)
        while keepalive is True and self.alive and _request_arrived(conn.sock, self.linger_seconds, conn):
            keepalive = super().handle(conn)
        return keepalive


def _request_arrived(sock: ssl.SSLSocket, timeout: float = _REQUEST_GRACE_SECONDS, conn: Any = None) -> bool:
    if conn is not None and conn.parser is not None and conn.parser.unreader.buf.getvalue():
        return True  # read ahead already
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        return bool(selector.select(timeout=timeout))
