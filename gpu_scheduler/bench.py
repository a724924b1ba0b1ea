"""`gpu-scheduler bench openb`: the openb placement-quality experiment, seeds in parallel processes.

The adapter around `scheduler_core.openb`: reads the CSVs, fans (policy, seed) replays out to
worker processes, shows progress on stderr, prints the table or the JSON contract, draws the plot.
With `--gangs` each (policy, seed) is replayed twice, its jobs placed pod by pod and as gangs.
With `--dra` the trace's GPUs are DRA devices (scheduler_core.openb, DRA mode), and ours is set against upstream's
first-fit device order.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import queue
import sys
import time
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import numpy as np

from scheduler_core import openb

PROGRESS_STEP = 500  # pods between progress reports from a worker
DRA_PROGRESS_STEP = 100  # the same in DRA mode, whose replays take 25-40 s a seed on the full trace


class BenchError(ValueError):
    """Input the benchmark cannot use: a missing file, a bad row, an unknown policy or seed range."""


def parse_seeds(text: str) -> list[int]:
    """`42-51`, `42,43,50` or `42`."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            if "-" in part.strip()[1:]:
                first, last = part.strip().split("-", 1)
                if int(last) < int(first):
                    raise ValueError(part)
                seeds.extend(range(int(first), int(last) + 1))
            else:
                seeds.append(int(part))
    except ValueError as err:
        raise BenchError(f"--seeds {text!r}: expected a range like 42-51 or a list like 42,43") from err
    return list(dict.fromkeys(seeds))


def read_rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as handle:
            return list(csv.DictReader(handle))
    except OSError as err:
        raise BenchError(f"{path}: {err.strerror or err}") from err


def load_trace(nodes_csv: Path, pods_csv: Path, *, dra: bool = False) -> openb.Trace:
    try:
        return openb.load(read_rows(nodes_csv), read_rows(pods_csv), dra=dra)
    except openb.TraceError as err:
        raise BenchError(str(err)) from err


_trace: openb.Trace | None = None
_progress: Any = None


def _start_worker(trace: openb.Trace, progress: Any) -> None:
    global _trace, _progress
    _trace, _progress = trace, progress


def _replay(policy: str, seed: int, mode: openb.JobMode | None) -> tuple[str, openb.Replay, float]:
    assert _trace is not None
    started = time.perf_counter()
    result = openb.replay(_trace, policy, seed, jobs=mode, progress=lambda done: _progress.put((policy, done)),
                          progress_every=DRA_PROGRESS_STEP if _trace.dra is not None else PROGRESS_STEP)
    return policy, result, time.perf_counter() - started


def run(trace: openb.Trace, policies: Sequence[str], seeds: Sequence[int], *, jobs: int, gangs: bool = False,
        show_progress: bool = True) -> dict[str, Any]:
    """Every policy over every seed (with `gangs`, in both job modes); returns the `--json` document, plus
    per-policy curves and times."""
    from tqdm import tqdm

    known = openb.DRA_POLICIES if trace.dra is not None else openb.POLICIES
    for policy in policies:
        if policy in openb.DRA_ONLY and trace.dra is None:
            raise BenchError(f"--policy {policy!r}: only with --dra")
        if policy not in known:
            raise BenchError(f"--policy {policy!r}: expected one of {', '.join(known)}")
    if gangs and trace.dra is not None:
        raise BenchError("--gangs: not with --dra (the DRA replay compares device orders pod by pod)")
    modes: tuple[openb.JobMode | None, ...] = ("pod-by-pod", "gang") if gangs else (None,)
    pods_per_seed = {seed: len(openb.arrival_order(trace, seed)) for seed in seeds}
    width = max(10, *map(len, policies))
    bars = {policy: tqdm(total=sum(pods_per_seed.values()) * len(modes), desc=f"{policy:>{width}}", unit="pod",
                         file=sys.stderr, disable=not show_progress, position=i, leave=True)
            for i, policy in enumerate(policies)}
    replays: dict[tuple[str, str | None], list[openb.Replay]] = {(p, m): [] for p in policies for m in modes}
    seconds: dict[tuple[str, str | None], float] = dict.fromkeys(replays, 0.0)
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with context.Manager() as manager:
        progress = manager.Queue()
        with futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker,
                                         initargs=(trace, progress)) as pool:
            pending = {pool.submit(_replay, policy, seed, mode) for policy in policies for seed in seeds
                       for mode in modes}
            while pending:
                done, pending = futures.wait(pending, timeout=0.5, return_when=futures.FIRST_COMPLETED)
                _drain(progress, bars)
                for finished in done:
                    policy, result, elapsed = finished.result()
                    replays[policy, result.mode].append(result)
                    seconds[policy, result.mode] += elapsed
            _drain(progress, bars)
    for bar in bars.values():
        bar.close()
    document: dict[str, Any] = {"policies": {}}
    for policy in policies:
        plain = sorted(replays[policy, modes[0]], key=lambda r: r.seed)  # pod by pod: the protocol's own figures
        entry = openb.summary(plain)
        entry["cpu_seconds"] = round(seconds[policy, modes[0]], 1)
        if gangs:
            entry["gangs"] = openb.gang_summary(plain, sorted(replays[policy, "gang"], key=lambda r: r.seed))
            entry["gangs"]["gang"]["cpu_seconds"] = round(seconds[policy, "gang"], 1)
        document["policies"][policy] = entry
    if trace.dra is not None:
        document["dra"] = dra_summary(trace, document["policies"])
    curves = {policy: np.mean([r.curve for r in replays[policy, modes[0]]], axis=0) for policy in policies}
    return {"document": document, "curves": curves}


def dra_summary(trace: openb.Trace, entries: dict[str, Any]) -> dict[str, Any]:
    """The `dra` entry of `--dra`'s JSON: what was replayed; the GPUs each policy left unallocated (mean over the
    seeds); and ours against each other policy, its allocation ratio over theirs, at each checkpoint."""
    assert trace.dra is not None
    gpus = trace.capacity_milli // 1000
    points = [str(p) for p in openb.CHECKPOINTS]
    ours = entries.get(openb.OURS)
    return {
        "devices": trace.dra.devices, "pods": len(trace.pod_facts), "shares_left_out": trace.dra.shares_left_out,
        "unallocated_gpus": {policy: {p: round(gpus * (100.0 - entry["alloc_ratio"][p]) / 100.0, 1) for p in points}
                             for policy, entry in entries.items()},
        "ours_against": {} if ours is None else {
            policy: {p: round(ours["alloc_ratio"][p] / entry["alloc_ratio"][p], 4) if entry["alloc_ratio"][p] else None
                     for p in points}
            for policy, entry in entries.items() if policy != openb.OURS},
    }


def _drain(progress: Any, bars: dict[str, Any]) -> None:
    while True:
        try:
            policy, done = progress.get_nowait()
        except queue.Empty:
            return
        bars[policy].update(done)


def table(document: dict[str, Any]) -> str:
    points = [str(p) for p in openb.CHECKPOINTS]
    width = max(11, *(len(policy) + 1 for policy in document["policies"]))
    lines = [f"{'policy':<{width}}" + "".join(f"{p + '%':>16}" for p in points) + f"{'cpu s':>9}"]
    for policy, entry in document["policies"].items():
        cells = "".join(f"{entry['alloc_ratio'][p]:>9.2f} ± {entry['alloc_ratio_std'][p]:<4.2f}" for p in points)
        lines.append(f"{policy:<{width}}{cells}{entry['cpu_seconds']:>9.0f}")
    return "\n".join(lines)


def gang_table(document: dict[str, Any]) -> str:
    """Gang mode, per policy: the ratios with each job whole or not at all, then jobs placed whole and the GPUs
    held by jobs only partly placed, placing jobs as gangs against placing their pods one by one."""
    points = [str(p) for p in openb.CHECKPOINTS]
    lines = [f"{'policy':<11}" + "".join(f"{p + '%':>16}" for p in points)
             + f"{'whole jobs':>22}{'GPUs in partial jobs':>24}",
             f"{'':<11}{'':>{16 * len(points)}}{'gang / pod by pod':>22}{'gang / pod by pod':>24}"]
    for policy, entry in document["policies"].items():
        gang, pod_by_pod = entry["gangs"]["gang"], entry["gangs"]["pod_by_pod"]
        cells = "".join(f"{gang['alloc_ratio'][p]:>9.2f} ± {gang['alloc_ratio_std'][p]:<4.2f}" for p in points)
        whole = f"{gang['jobs_whole']:.1f} / {pod_by_pod['jobs_whole']:.1f}"
        held = f"{gang['partial_job_gpus']:.1f} / {pod_by_pod['partial_job_gpus']:.1f}"
        lines.append(f"{policy:<11}{cells}{whole:>22}{held:>24}")
    return "\n".join(lines)


def dra_table(document: dict[str, Any]) -> str:
    """`--dra`: ours against each other policy, per checkpoint: allocation ratio ours / other, and the GPUs left
    unallocated by ours and by the other."""
    points = [str(p) for p in openb.CHECKPOINTS]
    dra = document["dra"]
    idle = dra["unallocated_gpus"]
    lines = [f"{'ours vs':<19}" + "".join(f"{p + '%':>22}" for p in points),
             f"{'':<19}" + f"{'ratio (GPUs idle)':>22}" * len(points)]
    for policy, ratios in dra["ours_against"].items():
        cells = [f"{'-' if ratios[p] is None else format(ratios[p], '.4f')} "
                 f"({idle[openb.OURS][p]:.0f} vs {idle[policy][p]:.0f})" for p in points]
        lines.append(f"{policy:<19}" + "".join(f"{cell:>22}" for cell in cells))
    return "\n".join(lines)


def plot(curves: dict[str, np.ndarray], path: Path, *, title: str) -> None:
    import logging

    import matplotlib

    matplotlib.use("Agg")
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(7, 4.5))
    demand = np.arange(1, len(next(iter(curves.values()))) + 1)
    for policy, curve in curves.items():
        axes.plot(demand, curve, label=policy, linewidth=1.5)
    axes.set_xlabel("arrived GPU demand (% of cluster GPU capacity)")
    axes.set_ylabel("GPU allocation ratio (%)")
    axes.set_title(title)
    axes.set_xlim(50, demand[-1])
    low = min(float(curve[59]) for curve in curves.values())
    axes.set_ylim(max(0.0, low - 5), 100)
    axes.grid(True, alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)


def main(nodes_csv: Path, pods_csv: Path, *, seeds_text: str, policies: Sequence[str] | None, as_json: bool,
         plot_path: Path | None, jobs: int | None, gangs: bool = False, dra: bool = False) -> int:
    seeds = parse_seeds(seeds_text)
    chosen = list(dict.fromkeys(policies or (openb.DRA_DEFAULT if dra else openb.POLICIES)))
    trace = load_trace(nodes_csv, pods_csv, dra=dra)
    workers = max(1, min(jobs or os.cpu_count() or 1, len(seeds) * len(chosen) * (2 if gangs else 1)))
    started = time.perf_counter()
    result = run(trace, chosen, seeds, jobs=workers, gangs=gangs)
    document = result["document"]
    if as_json:
        print(json.dumps(document, indent=2))
    else:
        if trace.dra is not None:
            shares = trace.dra.shares_left_out
            print(f"DRA: the nodes have no nvidia.com/gpu; their {trace.dra.devices} GPUs are DRA devices (a "
                  f"ResourceSlice a node) of DeviceClass {openb.DRA_CLASS}, which serves nvidia.com/gpu. The {shares} "
                  f"GPU-share pods of the list's {len(trace.pod_facts) + shares} are left out (the core serves "
                  "gpu-milli shares by the device plugin only). ours-device-plugin: the same pods, the GPUs by the "
                  "device plugin.")
        print(f"{pods_csv.name}{' with DRA' if trace.dra is not None else ''}: {len(trace.node_facts)} nodes, "
              f"{trace.capacity_milli // 1000} GPUs, {len(trace.pod_facts)} pods; seeds {seeds[0]}..{seeds[-1]} "
              f"({len(seeds)}); GPU allocation ratio % (mean ± std over seeds) when the arrived demand reaches:")
        print(table(document))
        if trace.dra is not None and document["dra"]["ours_against"]:
            print("\nours against the others, same pods and seeds: allocation ratio ours / other, and GPUs left "
                  "unallocated (ours vs other, mean):")
            print(dra_table(document))
        if gangs:
            first = next(iter(document["policies"].values()))["gangs"]
            low, high = openb.JOB_SIZES
            print(f"\ngangs: the arrivals asking for more than one GPU grouped into jobs of {low}-{high} pods "
                  f"({first['jobs']:.1f} jobs of {first['job_pods']:.1f} pods per seed, mean), each placed whole "
                  f"or not at all; the same jobs placed pod by pod are the table above:")
            print(gang_table(document))
        print(f"wall time {time.perf_counter() - started:.0f} s with {workers} worker process(es)")
    if plot_path is not None:
        name = pods_csv.stem.removeprefix("openb_pod_list_")
        plot(result["curves"], plot_path, title=f"openb {name}{', GPUs as DRA devices' if dra else ''}")
        print(f"plot written to {plot_path}", file=sys.stderr)
    return 0
