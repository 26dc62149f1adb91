"""Serving the metrics: the prometheus-client Collector (``prometheus``), the HTTP endpoint
(``server``) and its TLS and authentication configuration (``webconfig``)."""
