"""The scheduling core, the bottom layer: pure decisions over plain data, nothing else.

Kubernetes JSON in, facts and decisions out, `now` passed in: quantities and requests, predicates,
node and pod facts, the cluster model (`cluster`), the watched model both scheduler modes keep
(`watched`), filter and score plugins (`plugins`, `placement`, `workloads`), one decision
(`framework`), the queue, the warm-up decision, the simulator and the openb replay, Kubernetes
objects from text, and the parsed scheduling profile (`profile`). No file, socket, thread or
client; it imports nothing from webhook, certs or gpu_scheduler (the `layers` contract in setup.cfg).
"""
