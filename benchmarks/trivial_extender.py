"""A trivial kube-scheduler extender: accepts every node, scores all 0, binds as asked.

The reference for benchmarks/scheduler_e2e.py: the same Flask + gunicorn serving and the same
one-call Binding as `gpu-scheduler extender`, and nothing else, so the gap between the two is
the cost of our decisions, and the gap to kube-scheduler alone is the cost of the extender
protocol itself on this machine.

    python benchmarks/trivial_extender.py KUBECONFIG PORT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def create_app(kubeconfig: str) -> Any:
    from flask import Flask, jsonify, request

    from gpu_scheduler import kubeclient
    from gpu_scheduler.runtime import binding

    app = Flask("trivial-extender")
    api = kubeclient.api_client(kubeconfig)

    @app.post("/filter")
    def filter_nodes() -> Any:
        args = json.loads(request.get_data())
        return jsonify(NodeNames=args["NodeNames"], FailedNodes={}, FailedAndUnresolvableNodes={}, Error="")

    @app.post("/prioritize")
    def prioritize() -> Any:
        return jsonify([{"Host": name, "Score": 0} for name in json.loads(request.get_data())["NodeNames"]])

    @app.post("/bind")
    def bind() -> Any:
        args = json.loads(request.get_data())
        binding.bind(api, namespace=args["PodNamespace"], name=args["PodName"], uid=args["PodUID"], node=args["Node"])
        return jsonify(Error="")

    @app.get("/healthz")
    def healthz() -> Any:
        return "ok"

    return app


if __name__ == "__main__":
    from webhook import serving

    kubeconfig, port = sys.argv[1], int(sys.argv[2])
    serving.serve(lambda: create_app(kubeconfig),
                  serving.ServerOptions(host="127.0.0.1", port=port, workers=1, threads=32, log_level="warning",
                                        worker_class="webhook.workers.LingeringThreadWorker"))
