"""Command line and shared adapters of gpu-scheduler."""
