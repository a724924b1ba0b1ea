"""The scheduler at runtime (top layer, with the rest of gpu_scheduler): `gpu-scheduler run` and `extender`.

`running` is the loop of `run` (watches in, decisions, bindings out), `standalone` wraps it with the
configuration source, leader election and the health server; `extender` serves kube-scheduler's
extender verbs; `binding` is the one write that places a pod; `metrics` the scheduler's Prometheus
series. Both modes keep their view of the cluster in scheduler_core.watched and decide with
scheduler_core.framework.
"""
