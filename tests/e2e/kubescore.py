"""The real kube-score, as `hack/kube-score.sh build` puts it in a cache directory: Kubernetes best-practice checks
on the objects the chart renders (tests/e2e/test_chart.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.e2e import controlplane as cp

KUBE_SCORE_VERSION = "v1.20.0"  # github.com/zegl/kube-score's module version, the release hack/kube-score.sh builds
BINARIES = ("kube-score",)
MISSING = ("kube-score not built: run hack/kube-score.sh build, or hack/control-plane.sh build, which runs it "
           f"(needs Go and the Go module proxy; builds kube-score {KUBE_SCORE_VERSION} into ~/.cache/gpu-scheduler)")
CRITICAL, WARNING = 1, 5  # kube-score's grades below OK (10)


def find_binaries() -> Path | None:
    return cp.binaries_in(cp.cache_dir("GPU_SCHEDULER_KUBE_SCORE_DIR", "kube-score", KUBE_SCORE_VERSION), BINARIES)


def require_binaries() -> Path:
    """The bin directory; without it skip, but under CI=true fail."""
    return cp.required(find_binaries(), "kube-score check", MISSING)


def findings(documents: list[dict[str, Any]], *flags: str) -> tuple[int, list[tuple[str, str, int, str]]]:
    """kube-score's exit code (1 when any check is CRITICAL) and every check below OK that ran, as (object, check
    id, grade, first comment)."""
    bin_dir = require_binaries()
    result = subprocess.run([str(bin_dir / "kube-score"), "score", "--output-format", "json", *flags, "-"],
                            input=yaml.safe_dump_all(documents), capture_output=True, text=True, timeout=60)
    assert result.returncode in (0, 1), result.stderr
    found = [(scored["object_name"], check["check"]["id"], check["grade"],
              ((check.get("comments") or [{}])[0]).get("summary", ""))
             for scored in json.loads(result.stdout) for check in scored["checks"]
             if check["grade"] < 10 and not check["skipped"]]
    return result.returncode, found
