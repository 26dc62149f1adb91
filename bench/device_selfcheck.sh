#!/usr/bin/env bash
# gpuwait selfcheck on this machine's GPU, from the source tree: PYTHONPATH=exporter, the
# machine's own Python packages (PyTorch, prometheus-client, psutil, pyyaml, nvidia-ml-py), no
# network. Leaves in $OUT (default ./selfcheck-out) at most seven files:
#   report.json, report.txt   the self-check's report (docs/selfcheck.md)
#   traces.tar                per phase the exporter's trace (gzip) and its replayed diagnosis
#   logs.tar.gz               per phase the exporter's and the workload's logs and counters
#   selfcheck.log             the self-check's progress
#   nvidia-smi.txt            nvidia-smi -q
#   environment.txt           versions, cgroup v2 and PSI availability
# and exits with the self-check's code (0 agree, 1 a phase disagrees, 2 could not check).
#
#   bench/device_selfcheck.sh [selfcheck options, e.g. --gpu 1 --phase-seconds 20]
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-$PWD/selfcheck-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/exporter${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PYTHON="${PYTHON:-python3}"
# The whole default run takes about five minutes; the limit leaves room for a slow setup
# while ending well inside a ten-minute slot.
LIMIT="${SELFCHECK_LIMIT:-540}"

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "kernel: $(uname -r)"
    echo "cores: $(nproc)"
    "$PYTHON" - <<'EOF'
import importlib, sys
print("python:", sys.version.split()[0], sys.executable)
for name in ("torch", "prometheus_client", "psutil", "yaml", "pynvml"):
    try:
        module = importlib.import_module(name)
        print(f"{name}: {getattr(module, '__version__', 'present')}")
    except Exception as e:  # the report below says what the self-check makes of it
        print(f"{name}: MISSING ({e})")
EOF
    echo "cgroup2: $(awk '{for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2") print $5; break }}' /proc/self/mountinfo)"
    echo "cgroup: $(grep '^0::' /proc/self/cgroup)"
    for f in /proc/pressure/cpu /proc/pressure/io; do
        [ -r "$f" ] && echo "$f: present" || echo "$f: absent"
    done
} > "$OUT/environment.txt" 2>&1
nvidia-smi -q > "$OUT/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed: $?" >> "$OUT/nvidia-smi.txt"

# Inside the checkout, not /tmp: random_reads writes its file here and needs a real disk
# (on tmpfs no read reaches a device and the phase is skipped).
work="$(mktemp -d "$PWD/.selfcheck.XXXXXX")"
timeout --kill-after=20 "$LIMIT" "$PYTHON" -m gpuwait.tool selfcheck --out "$work/run" --json "$@" \
    > "$OUT/report.json" 2> "$OUT/selfcheck.log"
code=$?
[ "$code" -eq 124 ] && echo "gpuwait selfcheck: stopped after ${LIMIT} s" >> "$OUT/selfcheck.log"

if [ -d "$work/run" ]; then
    cp "$work/run/report.txt" "$OUT/" 2>/dev/null
    [ -s "$OUT/report.json" ] || cp "$work/run/report.json" "$OUT/" 2>/dev/null
    (cd "$work/run" && tar cf "$OUT/traces.tar" --ignore-failed-read ./*.trace.jsonl.gz ./*.diagnose.json 2>/dev/null)
    (cd "$work/run" && tar czf "$OUT/logs.tar.gz" --ignore-failed-read ./*.log ./*.counters.json 2>/dev/null)
fi
rm -rf "$work"
tail -n 3 "$OUT/selfcheck.log"
echo "gpuwait selfcheck exited with $code; results in $OUT"
exit "$code"
