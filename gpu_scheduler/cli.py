"""`gpu-scheduler`: one command, a subcommand per job (contract in ARCHITECTURE.md).

Adapters only: parse arguments and files, call one pure function, print the result.
Heavy imports happen inside each subcommand so `--help` is instant and the webhook's
metrics mode is chosen before prometheus_client is first imported.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

EXIT_INVALID = 2


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("gpu-scheduler")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        # a group (`config`, `certs`, `bench`) without its command: show that group's commands
        getattr(args, "group", parser).print_help(sys.stderr)
        return EXIT_INVALID
    logging.basicConfig(
        level=getattr(args, "log_level", "info").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.run(args) or 0)
    except UsageError as err:
        print(f"gpu-scheduler: {err}", file=sys.stderr)
        return EXIT_INVALID


class UsageError(Exception):
    """A problem with what the user gave us; printed without a traceback."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu-scheduler",
        description="GPU-aware admission webhook and scheduler for Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    simulate = commands.add_parser(
        "simulate",
        help="place pods on a cluster snapshot, offline",
        description="Run admission and the scheduler over a cluster snapshot. With no arguments: the bundled "
                    "example (examples/nodes.yaml, examples/pods.yaml, examples/config.yaml).",
    )
    simulate.add_argument("--nodes", type=Path, metavar="FILE",
                          help="Node objects (YAML/JSON, List or stream), CSINodes for their volume limits, and the "
                               "ResourceSlices and DeviceClasses of their DRA devices")
    simulate.add_argument("--pods", type=Path, metavar="FILE",
                          help="Pod objects, Namespace objects for their labels, PodGroup objects for their pod "
                               "groups (coscheduling, Workload API, Volcano), and the storage their volumes use: "
                               "PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSIDrivers, "
                               "CSIStorageCapacities, VolumeAttachments; and their DRA ResourceClaims and "
                               "ResourceClaimTemplates")
    simulate.add_argument("--config", type=Path, metavar="FILE", help="config.yaml or a ConfigMap manifest")
    simulate.add_argument("--json", action="store_true", help="print the result as one JSON object")
    simulate.add_argument("-v", "--verbose", action="store_true",
                          help="on stderr, how admission treated each pending pod: every rule skipped and why")
    simulate.set_defaults(run=_simulate)

    mutate = commands.add_parser(
        "mutate",
        help="show what the webhook would do to a pod",
        description="Print the pod as the webhook would patch it on creation (or the JSON patch with --patch).",
    )
    mutate.add_argument("pod", metavar="POD.yaml", help="a Pod manifest (YAML or JSON)")
    mutate.add_argument("--config", required=True, metavar="FILE", help="config.yaml or a ConfigMap manifest")
    mutate.add_argument(
        "--namespace-labels", metavar="k=v,...",
        help="labels of the pod's namespace, for rules with a namespaceSelector (default: unknown, so such "
             "rules are skipped, and said so)",
    )
    mutate.add_argument("--patch", action="store_true", help="print the JSON patch instead of the pod")
    mutate.set_defaults(run=_mutate)

    config_cmd = commands.add_parser("config", help="work with the configuration")
    config_cmd.set_defaults(group=config_cmd)
    config_sub = config_cmd.add_subparsers(title="config commands", metavar="COMMAND")
    check = config_sub.add_parser(
        "check",
        help="validate a config file",
        description="Validate config.yaml or a ConfigMap manifest. Exit 0 when valid, 2 with every problem.",
    )
    check.add_argument("file", metavar="FILE")
    check.set_defaults(run=_config_check)

    certs_cmd = commands.add_parser("certs", help="certificates for the webhook")
    certs_cmd.set_defaults(group=certs_cmd)
    certs_sub = certs_cmd.add_subparsers(title="certs commands", metavar="COMMAND")
    generate = certs_sub.add_parser(
        "generate",
        help="make a CA and a serving certificate",
        description="Write ca.crt, tls.crt and tls.key (0600) for the webhook Service, and print the caBundle.",
    )
    generate.add_argument("--service", required=True, help="the webhook Service name")
    generate.add_argument("--namespace", required=True, help="the Service's namespace")
    generate.add_argument("--out", required=True, type=Path, metavar="DIR")
    generate.add_argument("--ip", action="append", default=[], metavar="IP", help="an IP SAN (repeatable)")
    generate.add_argument("--days", type=int, default=365, help="serving certificate validity (default 365)")
    generate.set_defaults(run=_certs_generate)
    ensure = certs_sub.add_parser(
        "ensure",
        help="create, reuse, renew or rotate the webhook's certificates in a Secret",
        description="Keep a kubernetes.io/tls Secret holding a CA and a serving certificate for the Service valid, "
                    "and the MutatingWebhookConfiguration's caBundle in step with it. Safe to run repeatedly "
                    "(as an init container and periodically).",
    )
    ensure.add_argument("--secret", required=True, metavar="NS/NAME")
    ensure.add_argument("--service", required=True, help="the webhook Service name")
    ensure.add_argument("--service-namespace", metavar="NS", help="default: the Secret's namespace")
    ensure.add_argument("--webhook-config", metavar="NAME", help="MutatingWebhookConfiguration whose caBundle to keep")
    ensure.add_argument("--ip", action="append", default=[], metavar="IP", help="an IP SAN (repeatable)")
    ensure.add_argument("--margin-days", type=int, default=30, help="renew when less is left (default 30)")
    ensure.add_argument("--days", type=int, default=365, help="serving certificate validity (default 365)")
    ensure.add_argument("--ca-days", type=int, default=3650, help="CA validity (default 3650)")
    ensure.add_argument("--grace-minutes", type=int, default=10,
                        help="after a CA rotation, keep trusting the old CA this long, so every webhook pod can "
                             "load the new serving certificate first (default 10)")
    ensure.add_argument("--every", metavar="DURATION",
                        help="keep running: check again every DURATION (e.g. 12h, 30m), as a sidecar of the "
                             "webhook does; without it, check once and exit (the init container)")
    ensure.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, then $KUBECONFIG")
    ensure.set_defaults(run=_certs_ensure)

    webhook = commands.add_parser(
        "webhook",
        help="serve the mutating admission webhook",
        description="Serve POST /mutate, /healthz, /readyz and /metrics over TLS under gunicorn.",
    )
    _add_config_source(webhook)
    webhook.add_argument("--cert", required=True, metavar="FILE", help="TLS certificate (PEM)")
    webhook.add_argument("--key", required=True, metavar="FILE", help="TLS private key (PEM)")
    webhook.add_argument("--port", type=int, default=8443)
    webhook.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    webhook.add_argument("--workers", type=int, default=2, help="gunicorn worker processes (default 2)")
    webhook.add_argument("--threads", type=int, default=4, help="threads per worker (default 4)")
    webhook.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, then $KUBECONFIG")
    webhook.add_argument("--access-log", action="store_true", help="log every request")
    webhook.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    webhook.set_defaults(run=_webhook)
    extender = commands.add_parser(
        "extender",
        help="serve the kube-scheduler HTTP extender",
        description="Serve POST /filter, /prioritize and /bind (kube-scheduler extender/v1), /healthz, /readyz "
                    "and /metrics under gunicorn: one worker process (one cluster model, so no GPU is given "
                    "twice) with several threads. Plain HTTP unless --cert and --key are given.",
    )
    _add_config_source(extender)
    extender.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, then $KUBECONFIG")
    extender.add_argument("--port", type=int, default=8888)
    extender.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    extender.add_argument("--threads", type=int, default=32,
                          help="request threads of the one worker (default 32: binds wait on the API)")
    extender.add_argument("--cert", metavar="FILE", help="TLS certificate (PEM), for enableHTTPS: true")
    extender.add_argument("--key", metavar="FILE", help="TLS private key (PEM), with --cert")
    extender.add_argument("--lease", default="gpu-scheduler-system/gpu-scheduler-extender", metavar="NS/NAME",
                          help="the Lease whose holder raises warmed-up pods' deletion cost (default: %(default)s)")
    extender.add_argument("--access-log", action="store_true", help="log every request")
    extender.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    extender.set_defaults(run=_extender)
    run = commands.add_parser(
        "run",
        help="run the standalone scheduler",
        description="Watch nodes and pods, schedule pending pods whose schedulerName is ours, bind them, "
                    "and raise the deletion cost of warmed-up pods.",
    )
    _add_config_source(run)
    run.add_argument("--kubeconfig", metavar="FILE", help="default: in-cluster, then $KUBECONFIG")
    run.add_argument("--leader-elect", action="store_true", help="schedule only while holding the leader lease")
    run.add_argument("--lease", default="gpu-scheduler-system/gpu-scheduler", metavar="NS/NAME",
                     help="the Lease used for leader election (default gpu-scheduler-system/gpu-scheduler)")
    run.add_argument("--port", type=int, default=10259, help="/healthz and /metrics over HTTP (default 10259)")
    run.add_argument("--binder-threads", type=int, default=32, metavar="N",
                     help="bindings in flight at once (default 32; each waits on the API)")
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    run.set_defaults(run=_run)

    bench_cmd = commands.add_parser("bench", help="placement-quality benchmarks")
    bench_cmd.set_defaults(group=bench_cmd)
    bench_sub = bench_cmd.add_subparsers(title="bench commands", metavar="COMMAND")
    bench_openb = bench_sub.add_parser(
        "openb",
        help="GPU allocation ratio of each policy on the openb trace",
        description="Replay an openb trace (Alibaba cluster-trace-gpu-v2023) through the scheduler core under the "
                    "published protocol: every pod plus random copies up to 1.3x the cluster's GPUs, in a seeded "
                    "random order, placed one at a time; the GPU allocation ratio when the arrived GPU demand "
                    "reaches 100, 110, 120 and 130%, mean and spread over the seeds. Policies: "
                    "random, dotproduct, gpupacking, bestfit, fgd, and ours (the product's default scheduling). "
                    "With --dra, the GPUs are DRA devices and ours is set against upstream's first-fit device order.",
    )
    bench_openb.add_argument("--trace-dir", type=Path, metavar="DIR",
                             help=f"the trace's csv directory (default: ${OPENB_DIR_ENV}); with it, --nodes defaults "
                                  f"to {OPENB_NODES} there and --pods may name a trace (default, gpushare40, ...)")
    bench_openb.add_argument("--nodes", type=Path, metavar="CSV",
                             help="openb_node_list_gpu_node.csv (sn,cpu_milli,memory_mib,gpu,model)")
    bench_openb.add_argument("--pods", metavar="CSV|TRACE",
                             help="openb_pod_list_*.csv, or with --trace-dir a trace name such as default")
    bench_openb.add_argument("--seeds", default="42-51", help="a range like 42-51 or a list (default 42-51)")
    bench_openb.add_argument("--policy", action="append", metavar="NAME",
                             help="a policy to run, repeatable (default: all; with --dra: ours, ours-first-fit, "
                                  "kube-like, ours-device-plugin)")
    bench_openb.add_argument("--json", action="store_true",
                             help='print {"policies": {NAME: {"alloc_ratio": {"100": %%, ...}, "seeds": [...]}}}')
    bench_openb.add_argument("--plot", type=Path, metavar="FILE.png",
                             help="draw allocation ratio against arrived demand, one line per policy")
    bench_openb.add_argument("--jobs", type=int, metavar="N", help="worker processes (default: the CPU count)")
    bench_openb.add_argument("--gangs", action="store_true",
                             help="also group the pods asking for more than one GPU into jobs of 2-16 (drawn from "
                                  "the seed), place each job whole or not at all, and show the GPUs that jobs only "
                                  "partly placed hold, against the same jobs placed pod by pod")
    bench_openb.add_argument("--dra", action="store_true",
                             help="replay with each GPU a DRA device: nodes without nvidia.com/gpu, a ResourceSlice "
                                  "of their GPUs as NVIDIA's DRA driver publishes them, a DeviceClass serving "
                                  "nvidia.com/gpu (whole-GPU pods keep asking for it; GPU-share pods are left out); "
                                  "policies ours, ours-first-fit (our node choice, upstream's first-fit devices), "
                                  "kube-like (a random node that fits, first-fit devices) and ours-device-plugin "
                                  "(the same pods on the device plugin), ours against each")
    bench_openb.set_defaults(run=_bench_openb)
    return parser


OPENB_DIR_ENV = "GPU_SCHEDULER_OPENB_DIR"
OPENB_NODES = "openb_node_list_gpu_node.csv"


def _openb_files(args: argparse.Namespace) -> tuple[Path, Path]:
    """--nodes and --pods, completed from --trace-dir (or $GPU_SCHEDULER_OPENB_DIR) where they are left out."""
    import os

    directory = args.trace_dir or (Path(os.environ[OPENB_DIR_ENV]) if os.environ.get(OPENB_DIR_ENV) else None)
    hint = (f"give --nodes and --pods, or --trace-dir DIR (or ${OPENB_DIR_ENV}) holding the trace's csv files "
            "(Alibaba clusterdata, cluster-trace-gpu-v2023/csv; see benchmarks/README.md)")
    if directory is not None and not directory.is_dir():
        raise UsageError(f"--trace-dir {directory}: no such directory")
    nodes = args.nodes or (directory / OPENB_NODES if directory else None)
    pods = Path(args.pods) if args.pods else None
    if pods is not None and directory is not None and not pods.suffix and "/" not in args.pods:
        pods = directory / f"openb_pod_list_{args.pods}.csv"  # a trace name
    if nodes is None or pods is None:
        raise UsageError(f"{'--nodes' if nodes is None else '--pods'} is missing: {hint}")
    return nodes, pods


def _bench_openb(args: argparse.Namespace) -> int:
    from gpu_scheduler import bench

    nodes, pods = _openb_files(args)
    try:
        return bench.main(nodes, pods, seeds_text=args.seeds, policies=args.policy, as_json=args.json,
                          plot_path=args.plot, jobs=args.jobs, gangs=args.gangs, dra=args.dra)
    except bench.BenchError as err:
        raise UsageError(str(err)) from err


def _add_config_source(parser: argparse.ArgumentParser) -> None:
    """`--config FILE | --config-map NS/NAME`, as every long-running command takes them."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, metavar="FILE", help="config file, watched for changes")
    source.add_argument("--config-map", metavar="NS/NAME", help="ConfigMap watched through the API")


def _duration(flag: str, value: str) -> Any:
    """`90s`, `30m`, `12h`, `1d` as a timedelta."""
    import datetime
    import re

    found = re.fullmatch(r"([1-9][0-9]*)([smhd])", value.strip())
    if not found:
        raise UsageError(f"{flag}: expected a duration such as 90s, 30m, 12h or 1d, got {value!r}")
    unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[found[2]]
    return datetime.timedelta(**{unit: int(found[1])})


def _namespaced(flag: str, value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name:
        raise UsageError(f"{flag}: expected NAMESPACE/NAME, got {value!r}")
    return namespace, name


def _run(args: argparse.Namespace) -> int:
    from gpu_scheduler import kubeclient
    from gpu_scheduler.runtime import standalone

    config_map = _namespaced("--config-map", args.config_map) if args.config_map else None
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"--config {args.config}: no such file")
    try:
        api = kubeclient.api_client(args.kubeconfig)
    except kubeclient.NoCredentials as err:
        raise UsageError(f"cannot reach a cluster: {err}") from err
    if args.binder_threads < 1:
        raise UsageError(f"--binder-threads {args.binder_threads}: must be at least 1")
    return standalone.run(api, config_file=args.config, config_map=config_map, leader_elect=args.leader_elect,
                          lease=_namespaced("--lease", args.lease), port=args.port,
                          binder_threads=args.binder_threads)


def _extender(args: argparse.Namespace) -> int:
    from gpu_scheduler import kubeclient
    from webhook import serving

    config_map = _namespaced("--config-map", args.config_map) if args.config_map else None
    lease = _namespaced("--lease", args.lease)
    if args.config is not None and not args.config.is_file():
        raise UsageError(f"--config {args.config}: no such file")
    if (args.cert is None) != (args.key is None):
        raise UsageError("--cert and --key go together (both for HTTPS, neither for plain HTTP)")
    for path in filter(None, (args.cert, args.key)):
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such file")
    try:
        kubeclient.api_client(args.kubeconfig)  # fail here, with a message, rather than in the worker
    except kubeclient.NoCredentials as err:
        raise UsageError(f"cannot reach a cluster: {err}") from err

    def load_app() -> Any:
        from gpu_scheduler.runtime import extender

        return extender.create_app(
            extender.Settings(config_file=args.config, config_map=config_map, kubeconfig=args.kubeconfig, lease=lease))

    serving.serve(
        load_app,
        serving.ServerOptions(
            cert_file=args.cert, key_file=args.key, host=args.host, port=args.port,
            workers=1,  # one model: a second worker would keep its own and could give a GPU twice
            threads=args.threads, log_level=args.log_level, access_log=args.access_log,
            proc_name="gpu-scheduler-extender", worker_class="webhook.workers.LingeringThreadWorker",
        ),
        preload=("gpu_scheduler.runtime.extender",),
    )
    return 0


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _simulate(args: argparse.Namespace) -> int:
    import datetime

    import functools

    from scheduler_core import simulation, volumes
    from scheduler_core.dra import state as dra_state
    from webhook import admission

    paths = {
        "--nodes": args.nodes or EXAMPLES / "nodes.yaml",
        "--pods": args.pods or EXAMPLES / "pods.yaml",
        "--config": args.config or EXAMPLES / "config.yaml",
    }
    for flag, path in paths.items():
        if not path.is_file():
            given = getattr(args, flag[2:]) is not None
            hint = "" if given else " (the bundled example is missing: pass --nodes, --pods and --config)"
            raise UsageError(f"{flag} {path}: no such file{hint}")
    settings = _load_config(str(paths["--config"]))
    storage_kinds = (*volumes.KINDS, *dra_state.KINDS, simulation.TEMPLATE_KIND)
    node_objects = _load_objects("--nodes", paths["--nodes"], kinds=("Node",), also=storage_kinds)
    pod_objects = _load_objects("--pods", paths["--pods"], kinds=("Pod", "Namespace"),
                                also=(*storage_kinds, "PodGroup"))
    storage = [obj for obj in node_objects + pod_objects if obj.get("kind") in storage_kinds]
    try:
        result = simulation.simulate([obj for obj in node_objects if obj.get("kind") == "Node"],
                                     [obj for obj in pod_objects if obj.get("kind") not in storage_kinds],
                                     scheduler_name=settings.scheduler_name,
                                     gpu_resources=settings.admission.gpu_resources, scheduling=settings.scheduling,
                                     admit=functools.partial(admission.admit, settings=settings),
                                     now=datetime.datetime.now(datetime.timezone.utc), storage_objects=storage)
    except simulation.InputError as err:
        raise UsageError(f"{paths['--nodes']}, {paths['--pods']}: {err}") from err
    if args.verbose:
        for placement in result.placements:
            for line in placement.admission:
                print(f"# {placement.pod}: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
    else:
        print(_simulation_table(result))
    return 0


NOTES = {"already-bound": "already bound (spec.nodeName in the input)"}


def _simulation_table(result: Any) -> str:
    rows = [("POD", "RULE", "NODE", "GPUS", "NOTE")]
    for p in result.placements:
        gpus = ",".join(map(str, p.gpus)) + (f" ({p.gpu_milli}/1000)" if p.gpu_milli and p.gpus else "")
        gpus = ",".join(filter(None, (gpus, *p.dra_devices)))
        rows.append((p.pod, p.rule or "-", p.node or "-", gpus or "-",
                     NOTES.get(p.outcome, p.reason or p.volume_note)))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths)) + "  " + row[4] for row in rows]
    summary = result.as_json()["summary"]
    lines.append("")
    lines.append(
        f"{summary['pods']} pods: {summary['scheduled']} placed by this run, {summary['already_bound']} already "
        f"bound, {summary['unschedulable']} unschedulable, {summary['not_ours']} left to other schedulers; "
        f"GPU allocation {100 * result.allocation_ratio:.1f}% of {result.total_milli // 1000} GPUs "
        f"({100 * result.allocation_ratio_before:.1f}% before this run)"
    )
    for usage in result.models:
        share = 100 * usage.used_milli / (usage.gpus * 1000)
        lines.append(f"  {usage.model:<28} {usage.nodes} node(s) {usage.gpus:>3} GPUs  "
                     f"{usage.used_milli / 1000:>6.2f} allocated ({share:.0f}%)")
    if result.groups:
        lines.append(f"{len(result.groups)} pod group(s):")
        lines.extend(f"  {group.note}" for group in result.groups)
    return "\n".join(line.rstrip() for line in lines)


def _mutate(args: argparse.Namespace) -> int:
    import jsonpatch

    from webhook import patches

    settings = _load_config(args.config)
    pod = _load_single_pod(args.pod)
    labels = _parse_labels(args.namespace_labels) if args.namespace_labels is not None else None
    decision = patches.decide(pod, namespace_labels=labels, settings=settings)
    for line in decision.explanation():
        print(f"# {line}", file=sys.stderr)
    if labels is None and any("namespace's labels are not known" in why for _, why in decision.skipped):
        print("# (give the namespace's labels with --namespace-labels k=v,... to evaluate namespaceSelector rules)",
              file=sys.stderr)
    if args.patch:
        print(json.dumps(decision.patch, indent=2))
    else:
        mutated = jsonpatch.apply_patch(pod, decision.patch) if decision.patch else pod
        print(yaml.safe_dump(mutated, sort_keys=False), end="")
    return 0


def _config_check(args: argparse.Namespace) -> int:
    from webhook import config

    try:
        text = Path(args.file).read_text()
    except OSError as err:
        raise UsageError(f"cannot read {args.file}: {err.strerror}") from err
    try:
        settings = config.loads(text)
    except config.ConfigError as err:
        print(f"{args.file}: invalid, {len(err.problems)} problem(s):", file=sys.stderr)
        for problem in err.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_INVALID
    rules = settings.admission.rules
    names = ", ".join(rule.name for rule in rules) or "none"
    print(
        f"{args.file}: valid: schedulerName {settings.scheduler_name}, {len(rules)} rule(s) ({names}), "
        f"nodePolicy {settings.scheduling.node_policy}, gpuPolicy {settings.scheduling.gpu_policy}"
    )
    return 0


def _certs_generate(args: argparse.Namespace) -> int:
    from certs import files, pki

    try:
        ca = pki.new_ca(f"{args.service}.{args.namespace} webhook CA")
        serving = pki.issue(
            ca,
            f"{args.service}.{args.namespace}.svc",
            dns_names=pki.service_dns_names(args.service, args.namespace),
            ip_addresses=args.ip,
            valid_days=args.days,
        )
    except ValueError as err:
        raise UsageError(f"--ip: {err}") from err
    files.write_serving_bundle(args.out, ca, serving)
    print(f"wrote {args.out}/ca.crt, tls.crt, tls.key; caBundle:", file=sys.stderr)
    print(pki.ca_bundle(ca.cert_pem))
    return 0


def _certs_ensure(args: argparse.Namespace) -> int:
    import datetime

    from kubernetes.client.exceptions import ApiException

    from certs import ensuring, lifecycle
    from gpu_scheduler import kubeclient

    secret = _namespaced("--secret", args.secret)
    service_namespace = args.service_namespace or secret[0]
    for flag, value, least in (("--margin-days", args.margin_days, 1), ("--days", args.days, 1),
                               ("--ca-days", args.ca_days, 1), ("--grace-minutes", args.grace_minutes, 0)):
        if value < least:
            raise UsageError(f"{flag}: must be at least {least}, got {value}")
    if args.ca_days <= args.days + args.margin_days:
        raise UsageError(f"--ca-days: must exceed --days plus --margin-days ({args.days + args.margin_days}), "
                         f"got {args.ca_days}: the CA must outlive the certificates it signs")
    every = _duration("--every", args.every) if args.every else None
    policy = lifecycle.Policy(dns_names=lifecycle.dns_names_for(args.service, service_namespace),
                              ip_addresses=tuple(args.ip), margin=datetime.timedelta(days=args.margin_days),
                              serving_days=args.days, ca_days=args.ca_days,
                              grace=datetime.timedelta(minutes=args.grace_minutes))
    ensure_args: dict[str, Any] = {"secret": secret, "policy": policy, "webhook_config": args.webhook_config,
                                   "common_name": f"{args.service}.{service_namespace}.svc"}
    try:
        api = kubeclient.api_client(args.kubeconfig)
        if every is not None:
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            ensuring.keep(api, every=every, stop=stop, **ensure_args)
            return 0
        plan, updated = ensuring.ensure(api, **ensure_args)
    except kubeclient.NoCredentials as err:
        raise UsageError(f"cannot reach a cluster: {err}") from err
    except ValueError as err:
        raise UsageError(str(err)) from err
    except ApiException as err:
        raise UsageError(f"the API refused: HTTP {err.status} {err.reason}: {err.body}") from err
    print(f"{args.secret}: {plan.action} ({plan.reason}); caBundle updated in {updated} webhook(s)")
    return 0


def _webhook(args: argparse.Namespace) -> int:
    from webhook import serving

    for path in (args.cert, args.key):
        if not Path(path).is_file():
            raise UsageError(f"{path}: no such file (make one with `gpu-scheduler certs generate`)")
    config_map = None
    if args.config_map:
        config_map = _namespaced("--config-map", args.config_map)
    elif not args.config.is_file():
        raise UsageError(f"--config {args.config}: no such file")

    def load_app() -> Any:
        from gpu_scheduler import webhook_worker

        return webhook_worker.create_app(
            webhook_worker.Settings(config_file=args.config, config_map=config_map, kubeconfig=args.kubeconfig)
        )

    serving.serve(
        load_app,
        serving.ServerOptions(
            cert_file=args.cert,
            key_file=args.key,
            host=args.host,
            port=args.port,
            workers=args.workers,
            threads=args.threads,
            log_level=args.log_level,
            access_log=args.access_log,
        ),
        preload=("gpu_scheduler.webhook_worker", "webhook.app", "kubernetes.client", "gpu_scheduler.watching"),
    )
    return 0


def _load_config(path: str) -> Any:
    from webhook import config

    try:
        return config.loads(Path(path).read_text())
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror}") from err
    except config.ConfigError as err:
        raise UsageError(f"{path}: invalid config:\n  " + "\n  ".join(err.problems)) from err


def _load_objects(flag: str, path: Path, *, kinds: tuple[str, ...], also: tuple[str, ...] = ()
                  ) -> list[dict[str, Any]]:
    from scheduler_core import objects

    try:
        text = path.read_text()
    except OSError as err:
        raise UsageError(f"{flag} {path}: cannot read ({err.strerror})") from err
    try:
        return objects.parse(text, origin=str(path), kinds=kinds, also=also)
    except objects.ObjectsError as err:
        raise UsageError(f"{flag} {err}") from err


def _load_single_pod(path: str) -> dict[str, Any]:
    from scheduler_core import objects

    found = _load_objects("POD.yaml", Path(path), kinds=("Pod",))
    if len(found) != 1:
        names = ", ".join(objects.name_of(o) for o in found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(f"POD.yaml {path}: expected exactly one Pod, found {len(found)} ({names})")
    return found[0]


def _parse_labels(text: str) -> dict[str, str]:
    labels = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--namespace-labels: expected k=v pairs separated by commas, got {item!r}")
        labels[key] = value
    return labels
