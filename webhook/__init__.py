"""The mutating admission webhook, the middle layer (beside certs; may import scheduler_core only).

Pure decisions: the config model (`config`), names and selectors, GPU demand and rule matching
(`rules`), the patch (`patches`), AdmissionReview (`reviews`), and admission as `simulate` runs it
(`admission`). Its own thin adapters: the Flask app factory (`app`, handed its configuration and
namespace lookup), the configuration in force (`reloading`), gunicorn serving and workers
(`serving`, `workers`) and metrics. The watches that feed it live in gpu_scheduler.
"""
