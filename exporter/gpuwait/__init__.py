"""gpuwait: a Prometheus exporter that tells what each GPU is waiting for."""

__version__ = "0.1.0"
