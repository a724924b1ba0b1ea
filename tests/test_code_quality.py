"""Checked contracts of the code itself: the pure core stays pure, and the types hold."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ["webhook", "scheduler_core", "certs", "gpu_scheduler"]


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_pure_modules_import_no_adapters():
    """The import-linter contract in setup.cfg: decisions import no Flask, client, or server."""
    result = subprocess.run([tool("lint-imports"), "--config", "setup.cfg"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    result = subprocess.run([tool("mypy"), *PACKAGES], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
