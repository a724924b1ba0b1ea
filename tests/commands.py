"""The `gpu-scheduler` console script as a user runs it: the installed entry point, not `python -m`."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def console_script() -> str:
    script = Path(sys.executable).with_name("gpu-scheduler")
    assert script.is_file(), f"{script} is missing: install the project (pip install -e '.[test]') first"
    return str(script)


def gpu_scheduler(*args: str, code: int = 0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run `gpu-scheduler ARGS` from the repository root and check its exit code."""
    result = subprocess.run([console_script(), *args], capture_output=True, text=True, cwd=ROOT, env=env)
    assert result.returncode == code, f"exit {result.returncode}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    return result
