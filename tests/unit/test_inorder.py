"""gpu_scheduler.runtime.inorder: one pod's reports reach the API in the order they were made.

The flake that asked for it (CI of stop 42): a pod gated for "ResourceClaim not created yet", tried again
milliseconds later once the claim came, was left showing the older message because the two reports ran on two
reporter threads and the older one wrote last.
"""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from gpu_scheduler.runtime import inorder


def test_the_calls_of_one_key_run_in_submission_order_however_long_each_takes():
    written: list[int] = []
    pool = ThreadPoolExecutor(4)
    ordered = inorder.InOrder(pool)
    jitter = random.Random(7)
    for index in range(40):
        ordered.submit("pod-uid", lambda i, pause: (time.sleep(pause), written.append(i)), index,
                       jitter.uniform(0, 0.003))
    pool.shutdown(wait=True)
    assert written == list(range(40))


def test_calls_of_different_keys_run_side_by_side():
    """Key a's call waits for key b's: were keys serialised together, it would time out."""
    pool = ThreadPoolExecutor(2)
    ordered = inorder.InOrder(pool)
    b_ran = threading.Event()
    seen: list[bool] = []
    ordered.submit("a", lambda: seen.append(b_ran.wait(5)))
    ordered.submit("b", b_ran.set)
    pool.shutdown(wait=True)
    assert seen == [True]


def test_a_failing_call_does_not_strand_the_ones_behind_it():
    written: list[str] = []
    pool = ThreadPoolExecutor(2)
    ordered = inorder.InOrder(pool)

    def fail() -> None:
        raise OSError("connection refused")
    ordered.submit("pod-uid", fail)
    ordered.submit("pod-uid", written.append, "next")
    pool.shutdown(wait=True)
    assert written == ["next"]


def test_a_shut_down_pool_refuses_as_executor_does_and_forgets_the_call():
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    ordered = inorder.InOrder(pool)
    with pytest.raises(RuntimeError):
        ordered.submit("pod-uid", print)
    with pytest.raises(RuntimeError):  # not swallowed as "a drain is already queued"
        ordered.submit("pod-uid", print)
