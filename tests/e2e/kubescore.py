"""The real kube-score, as `hack/kube-score.sh build` puts it in a cache directory: Kubernetes best-practice checks
on the objects the chart renders (tests/e2e/test_chart.py).

kube-score v1.20.0's `score` reads each file it is given, `-` for stdin, and exits 0, or 1 when any check that ran is
CRITICAL (a WARNING too with --exit-one-on-warning); it also exits 1 when it fails, saying "Failed to score files: ..."
on stderr and nothing on stdout, and 2 on an unknown flag. It reads no config file and no kubeconfig.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from tests.e2e import controlplane as cp

KUBE_SCORE_VERSION = "v1.20.0"  # github.com/zegl/kube-score's module version, the release hack/kube-score.sh builds
BINARIES = ("kube-score",)
MISSING = ("kube-score not built: run hack/kube-score.sh build, or hack/control-plane.sh build, which runs it "
           f"(needs Go and the Go module proxy; builds kube-score {KUBE_SCORE_VERSION} into ~/.cache/gpu-scheduler)")
CRITICAL, WARNING, OK = 1, 5, 10  # kube-score's grades (scorecard.Grade; 7 is "almost OK")
EXIT_CRITICAL = 1  # `score`'s exit code when a check is CRITICAL
FAILED = "Failed to "  # how kube-score's own failures start on stderr (exit code 1, like EXIT_CRITICAL)


TOOL = cp.CachedTool("GPU_SCHEDULER_KUBE_SCORE_DIR", "kube-score", KUBE_SCORE_VERSION, BINARIES,
                    "kube-score check", MISSING)
find_binaries = TOOL.find
require_binaries = TOOL.require


class KubeScoreError(cp.CommandError):
    """kube-score exited with a code the caller did not expect, or failed."""


def kube_score(*args: str | Path, stdin: str | None = None, check: bool = True, timeout: float = 60.0,
               exit_codes: Collection[int] = (0,)) -> subprocess.CompletedProcess[str]:
    """Run `kube-score ARGS` (`stdin` on its standard input, for the file `-`); returns what it printed and its exit
    code. With `check`, an exit code not in `exit_codes` raises KubeScoreError, and so does kube-score's own failure
    whatever its code: pass (0, EXIT_CRITICAL) to `score` objects that may fail a check."""
    result = subprocess.run([str(TOOL.bin_dir() / "kube-score"), *(str(arg) for arg in args)], input=stdin,
                            capture_output=True, text=True, timeout=timeout, check=False)
    if check and (result.returncode not in exit_codes or result.stderr.startswith(FAILED)):
        raise KubeScoreError(result)
    return result


def score(documents: list[dict[str, Any]], *flags: str) -> tuple[int, list[dict[str, Any]]]:
    """`kube-score score --output-format json FLAGS -` on `documents`: its exit code (0, or EXIT_CRITICAL) and the
    scored objects (its JSON v2: object_name, type_meta, object_meta, checks, file_name, file_row)."""
    require_binaries()
    result = kube_score("score", "--output-format", "json", *flags, "-", stdin=yaml.safe_dump_all(documents),
                        exit_codes=(0, EXIT_CRITICAL))
    return result.returncode, json.loads(result.stdout) or []  # no objects: null


def findings(documents: list[dict[str, Any]], *flags: str) -> tuple[int, list[tuple[str, str, int, str]]]:
    """kube-score's exit code (1 when any check is CRITICAL) and every check below OK that ran, as (object, check
    id, grade, first comment)."""
    status, scored = score(documents, *flags)
    found = [(scored_object["object_name"], check["check"]["id"], check["grade"],
              ((check.get("comments") or [{}])[0]).get("summary", ""))
             for scored_object in scored for check in scored_object["checks"]
             if check["grade"] < OK and not check["skipped"]]
    return status, found
