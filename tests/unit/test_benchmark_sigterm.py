"""A benchmark told to stop with SIGTERM still stops what it started (benchmarks/sides.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from benchmarks import sides


def test_sigterm_ends_a_benchmark_through_its_cleanup() -> None:
    previous = signal.getsignal(signal.SIGTERM)
    cleaned_up = False
    try:
        sides.stop_cleanly_on_sigterm()
        with pytest.raises(SystemExit) as ended:
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler interrupts this
            finally:
                cleaned_up = True
        assert ended.value.code == 128 + signal.SIGTERM
        assert cleaned_up
    finally:
        signal.signal(signal.SIGTERM, previous)
