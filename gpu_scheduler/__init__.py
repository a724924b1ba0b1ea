"""The process shell, the top layer: Kubernetes I/O, the scheduler runtime, the command line.

Credentials and raw requests (`kubeclient`, `rawapi`), list-then-watch (`watching`), the
configuration sources and the Namespace label cache that feed the webhook (`sources`,
`namespaces`, `webhook_worker`), the scheduler runtime of `run` and `extender` (`runtime/`),
`gpu-scheduler` itself (`cli`) and `bench openb` (`bench`). It may import every layer below.
"""
