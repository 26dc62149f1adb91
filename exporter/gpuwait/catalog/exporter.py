"""Self-metrics: the exporter's own health, cost and build."""

from gpuwait.core.metric import MetricSpec

SOURCE = "exporter"

METRICS = (
    MetricSpec(
        "gpuwait_build_info", "gauge",
        "Always 1; labels carry the gpuwait version and the Python that runs it.",
        labels=("version", "python_version"), source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_source_up", "gauge",
        "1 when the source's last read succeeded, 0 when it failed or has not returned within its deadline (cause timeout); a source that is down serves none of its series.",
        labels=("source",), source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_source_reading_age_seconds", "gauge",
        "Seconds since the reading behind the source's series was taken (absent while the source serves none); it grows past the source's interval plus one --analysis.interval (a scrape serves the reading taken when the exposition was last rendered) only when reads are late, hang or fail.",
        labels=("source",), unit="seconds", source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_source_no_data", "gauge",
        "1 when the source's last read worked but the kernel had nothing for it to report (no PSI, no RDMA device, no NFS mount), else 0; such a source is up and read again on its schedule.",
        labels=("source",), source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_source_errors_total", "counter",
        "Read or parse errors of a source, counted per failed part (file, device, counter).",
        labels=("source",), source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_source_reads_total", "counter",
        "Reads the sampler has made of a source.",
        labels=("source",), source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_source_read_seconds_total", "counter",
        "Wall time spent reading and parsing a source, summed over all reads.",
        labels=("source",), unit="seconds", source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_source_read_duration_seconds", "gauge",
        "Mean wall time of one read of the source over the window.",
        labels=("source",), unit="seconds", source=SOURCE, window=True,
    ),
    MetricSpec(
        "gpuwait_source_interval_seconds", "gauge",
        "The sampling interval configured for the source.",
        labels=("source",), unit="seconds", source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_sampler_lag_seconds", "gauge",
        "Largest delay of a read behind its schedule over the window.",
        labels=("source",), unit="seconds", source=SOURCE, window=True,
    ),
    MetricSpec(
        "gpuwait_sampler_overruns_total", "counter",
        "Scheduled reads skipped because the previous read of the source was still running.",
        labels=("source",), source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_window_samples", "gauge",
        "Samples of the source currently held in the analysis window.",
        labels=("source",), source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_analysis_duration_seconds", "gauge",
        "Wall time of the last pass of window analysis over all sources (the window summaries only the scrape shows are made by the first scrape after the pass, not counted here).",
        unit="seconds", source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_analysis_runs_total", "counter",
        "Passes of window analysis since start.",
        source=SOURCE,
    ),
    MetricSpec(
        "gpuwait_scrape_errors_total", "counter",
        "Errors while turning a source's data into metrics; the source's series are left out of that scrape.",
        labels=("source",), source=SOURCE,
    ),
)
