"""Who owns a GPU process, and what that owner's processes do on the CPU side: the owner named
by /proc/<pid>/cgroup (``cgroup``: Kubernetes pod, Slurm job, container, systemd unit), the
per-process files of /proc (``procpid``), the tracker that follows a GPU process to its
workers (``tracker``), the directory of the owners holding a GPU now, which the gpu
collector fills and the cgroup collector reads (``directory``), and the kubelet's pod list
that names the pods cgroup paths know by UID only (``kubelet``)."""
