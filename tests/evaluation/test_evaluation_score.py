"""The scorer's output: the real exporter's diagnosis and replay of short traces, scored
against their truths. Nothing here asserts how right the verdict is."""

import json
import re
import subprocess
import sys

from evaluation import cache, exporter
from evaluation.onsets import follow, percentile
from evaluation.scenarios import select
from evaluation.exporter import REPO
from evaluation.score import render, run_one, score


def test_the_scorer_reports_steady_and_onset_scenarios(short_runs):
    steady_dir, steady_truth = short_runs("h2d_pageable_spin", folder="scored")
    onset_dir, onset_truth = short_runs("onset_power_cap_lowered", folder="scored2", duration=10.0, onset=4.0)
    results = {"h2d_pageable_spin": run_one(("steady", str(steady_dir), "h2d_pageable_spin")),
               "onset_power_cap_lowered": run_one(("onset", str(onset_dir), "onset_power_cap_lowered"))}
    assert "error" not in results["h2d_pageable_spin"], results["h2d_pageable_spin"]
    assert set(results["h2d_pageable_spin"]["final"]) == set(range(8))
    series = results["onset_power_cap_lowered"]["series"]
    assert set(series) == set(range(8))
    # one verdict per analysis pass, once a second of trace
    times = [t for t, _ in series[0]]
    assert times == sorted(times) and len(times) >= 8 and all(abs(b - a - 1.0) < 1e-6 for a, b in zip(times, times[1:]))
    scenarios = select("h2d_pageable_spin,onset_power_cap_lowered")
    summary = score(scenarios, {"h2d_pageable_spin": steady_truth, "onset_power_cap_lowered": onset_truth}, results)
    text = render(summary)
    assert summary["all"]["gpus"] == 16
    assert sum(sum(row.values()) for row in summary["confusion"].values()) == 16
    assert re.search(r"^h2d_pageable_spin +steady +\d/8 ", text, re.M)
    assert re.search(r"^onset_power_cap_lowered +onset +\d/8 ", text, re.M)
    assert "confusion (rows: truth" in text
    assert re.search(r"^GPUs right: \d+/16 \(\d+%\); steady \d+/8, onset scenarios at the end of the trace \d+/8$", text, re.M)
    assert re.search(r"^false waits: \d+ of \d+ GPUs whose truth is none were given a cause$", text, re.M)
    assert re.search(r"^time from onset to the right verdict \(8 GPUs whose truth changes\): median (\d+ s|never), "
                     r"p90 (\d+ s|never), within 15 s \d+%, never \d$", text, re.M)
    json.dumps(summary)


def test_a_trace_the_reader_refuses_is_an_error_not_a_verdict(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "gpuwait-trace", "version": 999}\n')
    assert "version" in exporter.diagnose(str(bad))["error"]
    assert "error" in run_one(("onset", str(tmp_path), "bad"))


def test_follow_measures_the_first_and_the_settled_verdict():
    series = [(t, "none") for t in range(1, 11)] + [(11, "data_pipeline"), (12, "none"), (13, "storage"), (14, "storage")]
    f = follow(0, series, 10.0, "none", "storage")
    assert (f.at_onset, f.before_right, f.first_right, f.settled, f.final) == ("none", True, 3.0, 3.0, "storage")
    assert f.wrong_after == {"data_pipeline": 1, "none": 1}
    never = follow(1, series, 10.0, "none", "network")
    assert never.first_right is None and never.settled is None
    assert never.first_right_after_impact is None


def test_delays_counted_from_the_impact():
    series = [(t, "none") for t in range(1, 11)] + [(t, "storage") for t in range(11, 40)]
    late = follow(0, series, 10.0, "none", "storage", impact=20.0)
    assert (late.first_right, late.first_right_after_impact, late.settled_after_impact) == (1.0, 0.0, 0.0)
    soon = follow(0, series[:10] + [(t, "none") for t in range(11, 30)] + [(t, "storage") for t in range(30, 40)],
                  10.0, "none", "storage", impact=5.0)
    assert (soon.first_right, soon.first_right_after_impact) == (20.0, 15.0)
    unaffected = follow(0, series, 10.0, "none", "storage", impact=None)
    assert unaffected.first_right_after_impact == unaffected.first_right == 1.0
    assert percentile([1.0, None, 3.0, 2.0], 0.5) == 2.0 and percentile([1.0, None], 0.9) is None


def test_the_cache_folder_names_the_code_the_seed_and_the_format(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUWAIT_EVALUATION_CACHE", str(tmp_path))
    one = cache.cache_dir(1, "v1")
    assert one.startswith(str(tmp_path)) and one != cache.cache_dir(2, "v1") != cache.cache_dir(1, "v2+nccl")
    assert cache.code_hash() == cache.code_hash()
    (tmp_path / "a.jsonl.gz").write_bytes(b"")
    assert cache.missing(str(tmp_path), ["a", "b"]) == ["a", "b"]
    (tmp_path / "a.truth.json").write_text("{}")
    assert cache.missing(str(tmp_path), ["a", "b"]) == ["b"]


def test_the_command_line_names_an_unknown_scenario():
    proc = subprocess.run([sys.executable, "-m", "evaluation.score", "--scenario", "no_such_scenario"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 2 and "no_such_scenario" in proc.stderr


def test_without_leaves_a_sources_readings_out_of_a_copy(tmp_path):
    import gzip

    from evaluation.score import without
    lines = [{"format": "gpuwait-trace", "version": 2}, {"t": 0.0, "source": "gpu", "data": {}},
             {"t": 0.6, "source": "nccl", "data": {}}, {"t": 1.0, "source": "gpu", "data": {}}]
    with gzip.open(tmp_path / "s.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(x) + "\n" for x in lines)
    (tmp_path / "s.truth.json").write_text('{"gpus": []}')
    folder = without(str(tmp_path), ["s"], frozenset({"nccl"}))
    assert folder.endswith("-without-nccl")
    with gzip.open(f"{folder}/s.jsonl.gz", "rt") as f:
        kept = [json.loads(line) for line in f]
    assert kept == [lines[0], lines[1], lines[3]]
    with gzip.open(tmp_path / "s.jsonl.gz", "rt") as f:
        assert len(f.readlines()) == 4  # the cached trace itself is untouched
    assert open(f"{folder}/s.truth.json").read() == '{"gpus": []}'
