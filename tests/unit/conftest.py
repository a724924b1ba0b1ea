"""Fixtures shared by the unit tests of the standalone scheduler's loop (test_running*.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpu_scheduler.runtime import running
from webhook import config


@pytest.fixture()
def scheduler(monkeypatch):
    bindings: list[tuple[str, str]] = []
    outcome: dict[str, Any] = {"error": None, "api_has": None, "unreadable": False}
    done = threading.Event()

    def fake_bind(api, *, namespace, name, uid, node, devices=()):
        bindings.append((f"{namespace}/{name}", node))
        if outcome["error"] is not None:
            raise outcome["error"]
        done.set()

    def fake_read(core, *, namespace, name):
        done.set()
        if outcome["unreadable"]:
            raise OSError("connection refused")
        if outcome["api_has"] is None:
            raise ApiException(status=404, reason="Not Found")
        return outcome["api_has"]

    monkeypatch.setattr(running.binding, "bind", fake_bind)
    monkeypatch.setattr(running.binding, "read_pod", fake_read)
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    live = running.LiveScheduler(api, config.Config(), binder_threads=1)
    live.bindings, live.outcome, live.bound_signal = bindings, outcome, done
    yield live
    live.stop()
