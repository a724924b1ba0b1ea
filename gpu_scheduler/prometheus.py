"""Asking a Prometheus HTTP API one instant query (`GET /api/v1/query`), with the client options Prometheus' own
scrape configs take: a CA file, a client certificate, skipping verification, a bearer token file read afresh at each
query (projected service account tokens rotate). One connection, no retries: the caller asks again at its next
refresh, and a slow or absent Prometheus costs one timeout, never more."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import urllib3

from scheduler_core import profile

MAX_ERROR_TEXT = 300  # of an error body, in messages


class QueryFailed(Exception):
    """The query got no answer to read: what happened, with the URL, for the log and the health detail."""


class Client:
    def __init__(self, source: profile.PrometheusSource):
        self.source = source
        tls: dict[str, Any] = {}
        if source.url.startswith("https:"):
            tls = {"cert_reqs": "CERT_NONE" if source.insecure_skip_verify else "CERT_REQUIRED",
                   "ca_certs": source.ca_file, "cert_file": source.cert_file, "key_file": source.key_file}
        self._pool = urllib3.PoolManager(num_pools=1, maxsize=1, retries=False,
                                         timeout=urllib3.Timeout(total=source.timeout_seconds), **tls)
        self.endpoint = f"{source.url}/api/v1/query"

    def query(self, expression: str) -> Any:
        """The decoded JSON answer to `expression`; raises QueryFailed."""
        headers = {"Accept": "application/json"}
        if self.source.bearer_token_file:
            headers["Authorization"] = f"Bearer {self._token()}"
        try:
            response = self._pool.request("GET", self.endpoint, fields={"query": expression}, headers=headers)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise QueryFailed(f"GET {self.endpoint}: {_reason(err)}") from err
        if response.status != 200:
            raise QueryFailed(f"GET {self.endpoint}: HTTP {response.status}: {_error_text(response.data)}")
        try:
            return orjson.loads(response.data)
        except orjson.JSONDecodeError as err:
            raise QueryFailed(f"GET {self.endpoint}: the answer is not JSON ({err})") from err

    def close(self) -> None:
        self._pool.clear()

    def _token(self) -> str:
        path = self.source.bearer_token_file
        assert path is not None
        try:
            token = Path(path).read_text().strip()
        except OSError as err:
            raise QueryFailed(f"bearerTokenFile {path}: cannot read it: {err.strerror or err}") from err
        if not token:
            raise QueryFailed(f"bearerTokenFile {path}: empty")
        return token


def _reason(err: Exception) -> str:
    """The innermost reason urllib3 gives (connection refused, a certificate that does not verify, a timeout)."""
    reason = getattr(err, "reason", None)
    while getattr(reason, "reason", None) is not None:
        reason = reason.reason  # type: ignore[union-attr]
    return str(reason or err)


def _error_text(body: bytes) -> str:
    """Prometheus' own error (`{"status": "error", "errorType": ..., "error": ...}`), or the body's start."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:MAX_ERROR_TEXT].decode(errors="replace").strip() or "(empty body)"
    if isinstance(answer, dict) and "error" in answer:
        return f"{answer.get('errorType', 'error')}: {answer['error']}"[:MAX_ERROR_TEXT]
    return str(answer)[:MAX_ERROR_TEXT]
