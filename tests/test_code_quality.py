"""Checked contracts of the code itself: the layers hold, no module cycles, the pure core stays pure, the types hold."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
PACKAGES = ["webhook", "scheduler_core", "certs", "gpu_scheduler"]


def tool(name: str) -> str:
    return str(Path(sys.executable).with_name(name))


def test_import_contracts_hold():
    """The import-linter contracts in setup.cfg: each package imports only from its own layer or a lower one
    (scheduler_core; then webhook and certs, independent of each other; then gpu_scheduler), the modules of a
    package import each other without cycles, and decisions import no Flask, client, or server."""
    result = subprocess.run([tool("lint-imports"), "setup.cfg"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    result = subprocess.run([tool("mypy"), *PACKAGES], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_repository_documents_itself():
    """No file points at documents or data outside the repository: a clone has none of them."""
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=True).stdout.split()
    outside = ("../shared", "shared/data/openb", "DESIGN.md")
    offenders = []
    for name in tracked:
        path = ROOT / name
        if path == Path(__file__):
            continue
        if path.suffix not in (".py", ".md", ".sh", ".cfg", ".toml", ".yaml", ".yml", ".txt", "") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        offenders += [f"{name}: {needle}" for needle in outside if needle in text]
    assert offenders == []
    assert (ROOT / "ARCHITECTURE.md").is_file()
