"""Where the configuration comes from, kept current: a file, or a ConfigMap through the API.

A mounted ConfigMap changes by an atomic symlink swap in its directory, so a file source
watches the directory (watchdog) and rereads the file on any event there. A ConfigMap
source watches the one object through the API, which applies edits in seconds instead of
waiting for the kubelet's volume sync. Either way an invalid edit is logged with every
problem and counted, and the last good configuration stays in force.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from gpu_scheduler import watching
from webhook import config, metrics

log = logging.getLogger(__name__)


class ConfigHolder:
    """The configuration in force. Readers take `current` without locking; updates swap it whole."""

    def __init__(self, on_change: Callable[[config.Config], None] | None = None):
        self.current: config.Config | None = None
        self._last_text: str | None = None
        self._lock = threading.Lock()
        self._on_change = on_change

    def offer(self, text: str, *, origin: str, as_configmap: dict[str, Any] | None = None) -> bool:
        """Validate a new version; put it in force only if valid. Returns whether it is in force."""
        with self._lock:
            if text == self._last_text and self.current is not None:
                return True
            try:
                parsed = config.from_configmap(as_configmap) if as_configmap is not None else config.loads(text)
            except config.ConfigError as err:
                self._last_text = text
                metrics.CONFIG_RELOAD_FAILURES.inc()
                state = "keeping the last good config" if self.current else "no valid config loaded yet"
                log.error(
                    "rejected invalid config from %s (%s):\n  %s", origin, state, "\n  ".join(err.problems)
                )
                return False
            self._last_text = text
            self.current = parsed
            metrics.CONFIG_RELOADS.inc()
            metrics.CONFIG_LAST_SUCCESS.set(time.time())
            log.info(
                "config from %s in force: schedulerName %s, %d rule(s)",
                origin, parsed.scheduler_name, len(parsed.admission.rules),
            )
        if self._on_change is not None:
            self._on_change(parsed)
        return True


class FileSource:
    """Watches a config file (plain or a ConfigMap volume) and offers each new version."""

    def __init__(self, path: Path, holder: ConfigHolder):
        self.path = path
        self.holder = holder
        self._observer: Any = None

    def start(self) -> FileSource:
        self.reload()
        handler = _AnyEvent(self.reload)
        self._observer = Observer()
        self._observer.schedule(handler, str(self.path.parent), recursive=False)
        self._observer.daemon = True
        self._observer.start()
        return self

    def reload(self) -> None:
        try:
            text = self.path.read_text()
        except OSError as err:
            log.error("cannot read config file %s: %s", self.path, err)
            return
        self.holder.offer(text, origin=str(self.path))

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()


class ConfigMapSource:
    """Watches one ConfigMap through the API and offers its `config.yaml` on every change."""

    def __init__(self, core_api: Any, namespace: str, name: str, holder: ConfigHolder):
        self.origin = f"ConfigMap {namespace}/{name}"
        self.holder = holder
        self._reflector = watching.Reflector(
            core_api.list_namespaced_config_map,
            name=self.origin,
            list_kwargs={"namespace": namespace, "field_selector": f"metadata.name={name}"},
            on_replace=self._replace,
            on_event=self._event,
        )

    def start(self) -> ConfigMapSource:
        self._reflector.start()
        return self

    def stop(self) -> None:
        self._reflector.stop()

    def _replace(self, items: list[Any]) -> None:
        if not items:
            log.error("%s not found; %s", self.origin,
                      "keeping the last good config" if self.holder.current else "not ready until it exists")
            return
        self._offer(items[0])

    def _event(self, kind: str, obj: Any) -> None:
        if kind == "DELETED":
            log.error("%s was deleted; keeping the last good config", self.origin)
        else:
            self._offer(obj)

    def _offer(self, obj: dict[str, Any]) -> None:
        data = dict(obj.get("data") or {})
        self.holder.offer(repr(sorted(data.items())), origin=self.origin, as_configmap={"data": data})


class _AnyEvent(FileSystemEventHandler):
    def __init__(self, callback: Callable[[], None]):
        self._callback = callback

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return
        self._callback()
