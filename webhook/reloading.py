"""Reloading the configuration: the version in force, for the webhook, `run` and `extender` alike.

Every new version of config.yaml is offered here, from whichever source watches it (see
gpu_scheduler.sources); only a valid one is put in force. An invalid edit is logged with every
problem and counted, and the last good configuration stays in force.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

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
