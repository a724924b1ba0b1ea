"""The openb experiment: trace rows to core objects, the published protocol, and `bench openb`'s contract.

The CSVs here are tiny ones written by the tests; the real trace stays outside the repository.
"""

import csv
import json
import os
from collections import Counter

import pytest

from gpu_scheduler import bench
from scheduler_core import openb
from tests.commands import gpu_scheduler

NODE_FIELDS = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
POD_FIELDS = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"]


def node_row(name, gpus=2, cpu=16000, memory=65536, model="T4"):
    return {"sn": name, "cpu_milli": str(cpu), "memory_mib": str(memory), "gpu": str(gpus), "model": model}


def pod_row(name, gpus=1, milli=1000, cpu=1000, memory=1024, spec=""):
    return {"name": name, "cpu_milli": str(cpu), "memory_mib": str(memory), "num_gpu": str(gpus),
            "gpu_milli": str(milli), "gpu_spec": spec}


@pytest.mark.parametrize(
    ("row", "gpus", "gpu_milli", "model", "cpu", "memory"),
    [
        (pod_row("whole", gpus=2), 2, 0, None, 1000, 1024 * 2**20 * 1000),
        (pod_row("share", gpus=1, milli=250), 0, 250, None, 1000, 1024 * 2**20 * 1000),
        (pod_row("one", gpus=1, milli=1000), 1, 0, None, 1000, 1024 * 2**20 * 1000),
        (pod_row("cpu-only", gpus=0, milli=0, cpu=4000), 0, 0, None, 4000, 1024 * 2**20 * 1000),
        (pod_row("model", gpus=1, spec="V100M16|V100M32"), 1, 0, "V100M16|V100M32", 1000, 1024 * 2**20 * 1000),
    ],
)
def test_a_pod_row_becomes_the_pod_the_core_parses(row, gpus, gpu_milli, model, cpu, memory):
    trace = openb.load([node_row("n")], [row])
    pod = trace.pod_facts[0]
    assert (pod.gpus, pod.gpu_milli, pod.model) == (gpus, gpu_milli, model)
    assert (pod.requests["cpu"], pod.requests["memory"]) == (cpu, memory)


def test_a_node_row_becomes_a_node_with_its_gpu_model():
    facts = openb.load([node_row("n", gpus=8, cpu=96000, model="G2")], []).node_facts[0]
    assert (facts.name, facts.gpu_count, facts.gpu_model, facts.allocatable["cpu"]) == ("n", 8, "G2", 96000)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"name": "p", "cpu_milli": "x", "memory_mib": "1", "num_gpu": "1", "gpu_milli": "1000"},
         "invalid literal for int()"),
        ({"name": "p", "cpu_milli": "1"}, "'memory_mib'"),
    ],
)
def test_bad_rows_name_the_row(row, message):
    with pytest.raises(openb.TraceError, match="pod row") as caught:
        openb.load([node_row("n")], [row])
    assert message in str(caught.value)


# --- the protocol ---------------------------------------------------------------------------------


def test_every_pod_arrives_and_copies_fill_up_to_1_3_times_capacity():
    demands = [1000, 500, 0, 2000, 250] * 20
    capacity = 60_000
    order = openb.arrivals(demands, capacity, 42)
    counts = Counter(order)
    assert set(counts) == set(range(len(demands)))  # every pod at least once
    total = sum(demands[i] for i in order)
    assert sum(demands) < total <= 1.3 * capacity


def test_copies_stop_at_the_first_draw_that_would_exceed_the_limit():
    order = openb.arrivals([1000] * 10, 10_000, 7)  # limit 13000: exactly 3 copies fit
    assert len(order) == 13


def test_the_seed_drives_draws_and_shuffle():
    demands = list(range(0, 2000, 20))
    first, again, other = (openb.arrivals(demands, 100_000, seed) for seed in (42, 42, 43))
    assert first == again
    assert first != other
    assert first[: len(demands)] != list(range(len(demands)))  # shuffled, not the list order


def test_a_list_already_above_the_limit_gets_no_copies():
    assert sorted(openb.arrivals([1000] * 4, 2000, 1)) == [0, 1, 2, 3]


def test_checkpoints_are_taken_when_the_arrived_demand_first_reaches_them():
    """4 GPUs, 2 cpu: of 1-GPU, 1-cpu pods only 2 fit, so the ratio is 50% from the second pod on."""
    trace = openb.load([node_row("n", gpus=4, cpu=2000)], [pod_row(f"p{i}") for i in range(4)])
    result = openb.replay(trace, "bestfit", 1)
    assert result.pods == 5  # 4 + 1 copy (5000 <= 5200 < 6000)
    assert result.alloc_ratio == {100: 50.0, 110: 50.0, 120: 50.0, 130: 50.0}
    assert result.curve[24] == 25.0  # the first pod alone is 25% of demand and placed
    assert len(result.curve) == 130 and result.curve[-1] == 50.0
    assert result.placed == 2


def test_checkpoints_record_the_state_at_that_arrival_not_at_the_end():
    """Whole-GPU pods then a cpu-heavy tail: what fits by 100% is counted at 100%."""
    nodes = [node_row("n", gpus=2, cpu=4000)]
    pods = [pod_row("a"), pod_row("b")]
    result = openb.replay(openb.load(nodes, pods), "fgd", 3)
    assert result.alloc_ratio[100] == 100.0  # both placed when the demand reached 100%
    assert result.pods == 2


# --- gang mode --------------------------------------------------------------------------------------


def two_gpu_pods(count, *, nodes=2, single_gpu_pods=0):
    """`count` pods of 2 GPUs (and some of 1) on `nodes` nodes of 8 GPUs; copies drawn while within 1.3x."""
    return openb.load([node_row(f"n{i}", gpus=8, cpu=16000) for i in range(nodes)],
                      [pod_row(f"m{i}", gpus=2) for i in range(count)]
                      + [pod_row(f"s{i}", gpus=1) for i in range(single_gpu_pods)])


@pytest.mark.parametrize("count", [1, 2, 3, 16, 17, 18, 33, 60])
def test_jobs_are_runs_of_2_to_16_multi_gpu_arrivals_in_arrival_order(count):
    trace = two_gpu_pods(count, nodes=count // 2 + 1, single_gpu_pods=5)
    for seed in range(30):
        order = openb.arrival_order(trace, seed)
        jobs = openb.job_positions(trace, order, seed)
        assert all(2 <= len(job) <= 16 for job in jobs)
        multi = [position for position, index in enumerate(order) if trace.pod_facts[index].gpus > 1]
        assert [position for job in jobs for position in job] == (multi if len(multi) > 1 else [])


def test_a_lone_multi_gpu_arrival_is_no_job():
    trace = two_gpu_pods(1, nodes=1, single_gpu_pods=2)
    order = [0, 1, 2]  # no copies
    assert openb.job_positions(trace, order, 42) == ()


def test_the_seed_fixes_the_jobs():
    trace = two_gpu_pods(60, nodes=16)
    jobs = {seed: openb.job_positions(trace, openb.arrival_order(trace, seed), seed) for seed in (42, 43)}
    assert jobs[42] == openb.job_positions(trace, openb.arrival_order(trace, 42), 42)
    assert [len(job) for job in jobs[42]] != [len(job) for job in jobs[43]]


@pytest.mark.parametrize(
    ("seed", "sizes", "pod_by_pod", "gang", "gang_ratio"),
    [
        # 5 pods placed, then 3 of the 7 of the next job: 6 GPUs held by a job that cannot run
        (2, [5, 7], (1, 1, 6), (1, 0, 0), 62.5),
        # one job of 12 pods (24 GPUs) on 16 GPUs: pod by pod, 8 of its pods hold every GPU
        (3, [12], (0, 1, 16), (0, 0, 0), 0.0),
    ],
)
def test_gangs_leave_no_gpu_to_partly_placed_jobs(seed, sizes, pod_by_pod, gang, gang_ratio):
    """(whole jobs, partly placed jobs, GPUs they hold) at the end, placing pods one by one and jobs whole."""
    trace = two_gpu_pods(12)
    plain, by_pod, whole = (openb.replay(trace, "bestfit", seed, jobs=mode) for mode in (None, "pod-by-pod", "gang"))
    assert by_pod.alloc_ratio == plain.alloc_ratio == dict.fromkeys(openb.CHECKPOINTS, 100.0)
    assert (by_pod.jobs, by_pod.job_pods) == (whole.jobs, whole.job_pods) == (len(sizes), 12)
    assert (by_pod.jobs_whole, by_pod.jobs_partial, by_pod.partial_job_gpus) == pod_by_pod
    assert (whole.jobs_whole, whole.jobs_partial, whole.partial_job_gpus) == gang
    assert whole.alloc_ratio == dict.fromkeys(openb.CHECKPOINTS, gang_ratio)
    assert [len(job) for job in openb.job_positions(trace, openb.arrival_order(trace, seed), seed)] == sizes


@pytest.mark.parametrize(("text", "seeds"), [("42-51", list(range(42, 52))), ("42", [42]), ("1,3,3", [1, 3]),
                                             ("5-6,9", [5, 6, 9])])
def test_seed_ranges(text, seeds):
    assert bench.parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["x", "5-3", ""])
def test_bad_seed_ranges(text):
    with pytest.raises(bench.BenchError, match="--seeds"):
        bench.parse_seeds(text)


# --- the command ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_trace(tmp_path_factory):
    return write_tiny_trace(tmp_path_factory.mktemp("openb"))


def write_tiny_trace(folder):
    """nodes.csv and pods.csv in `folder`: 4 nodes (20 GPUs), 7 pods of which 2 ask for a GPU share."""
    nodes = [node_row(f"n{i}", gpus=g, cpu=c, model=m)
             for i, (g, c, m) in enumerate([(8, 96000, "G2"), (2, 104000, "T4"), (2, 16000, "P100"), (8, 96000, "G2")])]
    pods = [pod_row(f"p{i}", gpus=g, milli=m, cpu=c, spec=s) for i, (g, m, c, s) in enumerate(
        [(1, 1000, 8000, ""), (1, 500, 4000, ""), (0, 0, 16000, ""), (2, 1000, 16000, ""), (1, 300, 2000, "T4"),
         (1, 1000, 12000, "G2"), (4, 1000, 32000, "")])]
    for path, fields, rows in ((folder / "nodes.csv", NODE_FIELDS, nodes), (folder / "pods.csv", POD_FIELDS, pods)):
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return folder


def bench_cli(*args, code=0):
    return gpu_scheduler("bench", "openb", *args, code=code)


def test_json_follows_the_contract(tiny_trace):
    result = bench_cli("--nodes", str(tiny_trace / "nodes.csv"), "--pods", str(tiny_trace / "pods.csv"),
                       "--seeds", "42-43", "--policy", "bestfit", "--policy", "ours", "--json", "--jobs", "1")
    document = json.loads(result.stdout)
    assert list(document) == ["policies"]
    assert list(document["policies"]) == ["bestfit", "ours"]
    for entry in document["policies"].values():
        assert list(entry["alloc_ratio"]) == ["100", "110", "120", "130"]
        assert all(0.0 <= value <= 100.0 for value in entry["alloc_ratio"].values())
        assert entry["alloc_ratio"]["130"] > 1.0  # percent, not a fraction
        assert entry["seeds"] == [42, 43]
        assert list(entry["alloc_ratio_std"]) == ["100", "110", "120", "130"]
    assert "ours" in result.stderr  # a progress bar per policy


def test_gangs_add_their_figures_beside_the_contract(tiny_trace):
    args = ("--nodes", str(tiny_trace / "nodes.csv"), "--pods", str(tiny_trace / "pods.csv"), "--seeds", "42-43",
            "--policy", "bestfit", "--jobs", "2")
    plain = json.loads(bench_cli(*args, "--json").stdout)["policies"]["bestfit"]
    entry = json.loads(bench_cli(*args, "--json", "--gangs").stdout)["policies"]["bestfit"]
    gangs = entry.pop("gangs")
    for document in (plain, entry):
        del document["cpu_seconds"]
    assert entry == plain  # the contract's figures are those of the plain protocol
    assert gangs["jobs"] >= 1 and 2 <= gangs["job_pods"] / gangs["jobs"] <= 16
    assert set(gangs["pod_by_pod"]) == {"jobs_whole", "jobs_partial", "partial_job_gpus", "partial_job_gpus_per_seed"}
    assert gangs["gang"]["partial_job_gpus_per_seed"] == {"42": 0, "43": 0}
    assert list(gangs["gang"]["alloc_ratio"]) == ["100", "110", "120", "130"]
    table = bench_cli(*args, "--gangs").stdout
    assert "GPUs in partial jobs" in table and "\nbestfit " in table.split("gangs:")[1]


def test_the_table_and_the_plot(tiny_trace, tmp_path):
    plot = tmp_path / "openb.png"
    result = bench_cli("--nodes", str(tiny_trace / "nodes.csv"), "--pods", str(tiny_trace / "pods.csv"),
                       "--seeds", "1", "--plot", str(plot), "--jobs", "2")
    for policy in openb.POLICIES:
        assert f"\n{policy} " in result.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "tetris"], "--policy 'tetris': expected one of random, dotproduct, gpupacking, bestfit, fgd, ours"),
        (["--seeds", "9-1"], "--seeds '9-1': expected a range like 42-51"),
    ],
)
def test_bad_arguments_say_what_is_wrong(tiny_trace, args, message):
    result = bench_cli("--nodes", str(tiny_trace / "nodes.csv"), "--pods", str(tiny_trace / "pods.csv"), *args, code=2)
    assert message in result.stderr


def test_a_missing_file(tiny_trace):
    result = bench_cli("--nodes", str(tiny_trace / "nope.csv"), "--pods", str(tiny_trace / "pods.csv"), code=2)
    assert "nope.csv: No such file or directory" in result.stderr


def test_trace_dir_finds_the_node_list_and_names_the_pod_list(tiny_trace, tmp_path):
    """`--trace-dir DIR --pods NAME` (or $GPU_SCHEDULER_OPENB_DIR) reads the trace's own file names."""
    trace_dir = tmp_path / "csv"
    trace_dir.mkdir()
    (tiny_trace / "nodes.csv").rename(trace_dir / "openb_node_list_gpu_node.csv")
    (tiny_trace / "pods.csv").rename(trace_dir / "openb_pod_list_tiny.csv")
    args = ("--pods", "tiny", "--seeds", "42", "--policy", "bestfit", "--json", "--jobs", "1")
    by_flag = json.loads(bench_cli("--trace-dir", str(trace_dir), *args).stdout)
    by_env = json.loads(gpu_scheduler("bench", "openb", *args,
                                      env={**os.environ, "GPU_SCHEDULER_OPENB_DIR": str(trace_dir)}).stdout)
    for result in (by_flag, by_env):  # the CPU time it took differs from run to run
        del result["policies"]["bestfit"]["cpu_seconds"]
    assert by_flag == by_env and by_flag["policies"]["bestfit"]["seeds"] == [42]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pods", "x.csv"], "--nodes is missing: give --nodes and --pods, or --trace-dir DIR"),
        (["--trace-dir", "/nonexistent"], "--trace-dir /nonexistent: no such directory"),
    ],
)
def test_missing_trace_files_say_where_to_get_them(args, message):
    err = gpu_scheduler("bench", "openb", *args, code=2,
                        env={k: v for k, v in os.environ.items() if k != "GPU_SCHEDULER_OPENB_DIR"}).stderr
    assert message in err
