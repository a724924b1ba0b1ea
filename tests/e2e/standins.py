"""Stand-ins for the parts of a cluster the test control plane runs without (a kubelet, a CSI provisioner): each
polls the API on a thread of its own and does that part's job, an API error skipping one round."""

from __future__ import annotations

import threading

from kubernetes.client.exceptions import ApiException


class Poller:
    """`poll()` every `interval` seconds on a daemon thread from `start()` until `stop()`."""

    name = "e2e-poller"
    interval = 0.2

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name=self.name)

    def start(self) -> Poller:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(5)

    def poll(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.poll()
            except ApiException:
                continue
