"""The node model: threads on cores with cgroup quotas and pressure stall information,
disks and NFS mounts, NICs and RDMA ports, GPUs, and the jobs that drive them, advanced in
small time steps.

Each part follows a documented behaviour of the real system; the docstrings name the source
(docs/evaluation.md lists them all).
"""
