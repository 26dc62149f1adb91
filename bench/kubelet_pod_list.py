"""Cost of one kubelet pod list (GET /pods) to the exporter: time and peak memory of parsing it.

    python3 bench/kubelet_pod_list.py [--pods 110] [--repeat 20]

Builds a PodList of --pods pods shaped as a kubelet serves them (labels, annotations,
managedFields, env, volumes and mounts, container statuses: some 6 KB of JSON each), then
measures parse_pod_list against a reference measured in the same run: json.loads of the same
body, the floor any parse pays. The kubelet's default maxPods is 110. Peak memory is measured
with tracemalloc (Python allocations), which is what the fetch adds to the exporter's RSS
while it runs, once per collector.gpu.kubelet-interval or per unknown pod.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import tracemalloc
import uuid

from gpuwait.owners.kubelet import parse_pod_list


def pod(i: int) -> dict:
    name = f"train-{i:04d}"
    containers = [
        {"name": c, "image": f"registry.example/{c}:2.4.1",
         "env": [{"name": f"VAR_{k}", "value": "x" * 40} for k in range(12)],
         "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}},
         "volumeMounts": [{"name": f"vol-{k}", "mountPath": f"/mnt/vol-{k}"} for k in range(4)]}
        for c in ("trainer", "metrics")
    ]
    return {
        "metadata": {
            "name": name, "namespace": "research", "uid": str(uuid.uuid4()), "resourceVersion": str(1000 + i),
            "creationTimestamp": "2026-01-05T10:00:00Z",
            "labels": {f"label-{k}": f"value-{k}" for k in range(8)},
            "annotations": {f"example.com/annotation-{k}": "y" * 60 for k in range(6)},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": str(uuid.uuid4()),
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-01-05T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {f"f:field{k}": {} for k in range(30)}}],
        },
        "spec": {"containers": containers, "nodeName": "gpu-node-1", "restartPolicy": "Never",
                 "volumes": [{"name": f"vol-{k}", "persistentVolumeClaim": {"claimName": f"data-{k}"}} for k in range(4)]},
        "status": {"phase": "Running", "qosClass": "Guaranteed", "podIP": "10.244.1.7",
                   "containerStatuses": [{"name": c["name"], "containerID": f"containerd://{uuid.uuid4().hex * 2}",
                                          "ready": True, "restartCount": 0, "image": c["image"], "imageID": "",
                                          "started": True, "state": {"running": {"startedAt": "2026-01-05T10:00:05Z"}}}
                                         for c in containers]},
    }


def measure(fn, body: bytes, repeat: int) -> tuple[float, int]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn(body)
        times.append(time.perf_counter() - started)
    tracemalloc.start()
    fn(body)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(times), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                       "items": [pod(i) for i in range(args.pods)]}).encode()
    ref_s, ref_peak = measure(json.loads, body, args.repeat)
    got_s, got_peak = measure(parse_pod_list, body, args.repeat)
    print(f"pod list: {args.pods} pods, {len(body) / 2**20:.2f} MiB of JSON ({len(body) // args.pods} bytes a pod)")
    print(f"{'':24s}{'median ms':>10s}{'peak MiB':>10s}{'x reference':>13s}")
    print(f"{'json.loads (reference)':24s}{ref_s * 1000:10.1f}{ref_peak / 2**20:10.1f}{1.0:13.2f}")
    print(f"{'parse_pod_list':24s}{got_s * 1000:10.1f}{got_peak / 2**20:10.1f}{got_s / ref_s:13.2f}")


if __name__ == "__main__":
    main()
