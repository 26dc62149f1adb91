"""Simulated nodes: scenario models that produce coherent Readings for GPUs and host alike,
for demos, dashboards and the tests of the analysis."""
