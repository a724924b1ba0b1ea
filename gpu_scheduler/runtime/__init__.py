"""The scheduler at runtime (top layer, with the rest of gpu_scheduler): `gpu-scheduler run` and `extender`.

`running` is the loop of `run` (watches in, decisions, bindings out), `standalone` wraps it with the
configuration source, leader election and the health server; `extender` serves kube-scheduler's
extender verbs; `binding` is the one write that places a pod (and the read after a failed one);
`metrics` holds the Prometheus series of `run`, `model_metrics` the watched model's view that both
modes expose. Both modes are thin drivers of one model, scheduler_core.watched.WatchedCluster, and
decide with scheduler_core.framework.
"""
