"""Where the configuration comes from, kept current: a file, or a ConfigMap through the API.

A mounted ConfigMap changes by an atomic symlink swap in its directory, so a file source
watches the directory (watchdog) and rereads the file on any event there. A ConfigMap
source watches the one object through the API, which applies edits in seconds instead of
waiting for the kubelet's volume sync. Either way each version is offered to a
`webhook.reloading.ConfigHolder`, which keeps the last good configuration in force. The webhook,
`run` and `extender` all start theirs with `start`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from gpu_scheduler import watching
from webhook import reloading

log = logging.getLogger(__name__)


def start(holder: reloading.ConfigHolder, *, config_file: Path | None, config_map: tuple[str, str] | None,
          core_api: Any | None) -> FileSource | ConfigMapSource:
    """Watch the one source given (a file, or a ConfigMap `(namespace, name)` through `core_api`) into `holder`."""
    if (config_file is None) == (config_map is None):
        raise ValueError("exactly one of config_file and config_map must be given")
    if config_map is not None:
        if core_api is None:
            raise ValueError("--config-map needs cluster credentials, and none were found")
        return ConfigMapSource(core_api, config_map[0], config_map[1], holder).start()
    assert config_file is not None
    return FileSource(config_file, holder).start()


class FileSource:
    """Watches a config file (plain or a ConfigMap volume) and offers each new version."""

    def __init__(self, path: Path, holder: reloading.ConfigHolder):
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

    def __init__(self, core_api: Any, namespace: str, name: str, holder: reloading.ConfigHolder):
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
