"""Deletion-cost warm-up: once a pod has been Ready for `scheduling.warmup.seconds`, raise its
`controller.kubernetes.io/pod-deletion-cost` to `scheduling.warmup.cost`, once, and only while the cost is still the
one the webhook wrote (scheduler_core.warmup decides; this writes). At most `per_second` patches a second, on the
runner's reporter pool; a patch that fails is tried again after RETRY seconds.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpu_scheduler import rawapi, watching
from gpu_scheduler.runtime import metrics, writes
from gpu_scheduler.runtime.framework import Handle, Plugin
from scheduler_core import warmup

log = logging.getLogger(__name__)

RETRY = 30.0


class WarmUp(Plugin):
    name = "WarmUp"

    def __init__(self, handle: Handle, *, per_second: float = 20.0):
        super().__init__(handle)
        self.per_second = per_second
        self.promoting: dict[str, float] = {}  # uid -> when its patch was last sent (time.monotonic())

    def tick(self, now: float) -> None:
        candidates = self.handle.model.warm
        for uid in [uid for uid in self.promoting if uid not in candidates]:
            del self.promoting[uid]
        budget = int(self.per_second)
        wall = writes.now()
        for uid, candidate in list(candidates.items()):
            if budget <= 0:
                return
            if now - self.promoting.get(uid, -RETRY) < RETRY:
                continue
            patch = warmup.due(candidate, now=wall, warmup=self.handle.settings.scheduling.warmup)
            if patch is None:
                continue
            self.promoting[uid] = now
            budget -= 1
            self.handle.submit_report(promote, self.handle.api, candidate, patch)


def promote(api: Any, candidate: warmup.Candidate, patch: list[dict[str, Any]]) -> None:
    """The JSON patch that tests the current cost before it replaces it; a 422 means a user changed it."""
    try:
        rawapi.request(api, "PATCH", writes.pod_path(candidate.namespace, candidate.name), patch,
                       content_type=rawapi.JSON_PATCH)
        metrics.PROMOTIONS.labels("promoted").inc()
    except ApiException as err:
        result = "skipped" if err.status == 422 else "error"
        metrics.PROMOTIONS.labels(result).inc()
        log.info("deletion cost of %s not raised: %s", candidate.key, watching.describe_error(err))
    except (HTTPError, OSError) as err:
        metrics.PROMOTIONS.labels("error").inc()
        log.warning("deletion cost of %s not raised: %s", candidate.key, err)


