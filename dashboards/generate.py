"""The gpuwait Grafana dashboards, as code.

``python dashboards/generate.py`` writes one JSON file per dashboard into dashboards/json/,
which Grafana's file provider loads (deploy/local/grafana/). The JSON is committed; a test
rebuilds it and fails when the two differ, so edit this file, never the JSON. Thresholds and the
cluster label come from mixin/config.yml, the one configuration of rules and dashboards
(``--config site.yml`` for a site's own); the Helm chart's copy keeps them as placeholders its
``mixin:`` values fill (``templated()``).

Conventions every panel follows: a Prometheus datasource chosen by the ``datasource``
variable; the chained variables ``cluster`` -> ``job`` -> ``instance`` -> ``gpu`` -> ``owner``;
``$__rate_interval`` in every rate; a unit; threshold lines where a value has a meaning (the
alerts' own thresholds); a link to the runbook of every alert the panel mirrors; and a
description that ends with the claim ids (A1..A14 of the method) the panel serves, as every
row title does. Firing alerts of the chosen gpuwait jobs and nodes are drawn as annotations on
every dashboard.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from dataclasses import dataclass, field

from grafana_foundation_sdk.builders import bargauge, common as common_builders, dashboard, heatmap, prometheus, statetimeline, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import prometheus as prometheus_model
from grafana_foundation_sdk.models import heatmap as heatmap_model
from grafana_foundation_sdk.models import dashboard as model

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import mixin  # noqa: E402

OUT = HERE / "json"

#: The verdict's causes, in the order the state timeline encodes them: the exporter's own.
CAUSES = mixin.CAUSES
CAUSE_COLORS = {
    "none": "green", "data_pipeline": "orange", "storage": "purple", "host_transfer": "blue",
    "network": "red", "sync": "yellow", "insufficient_work": "text", "throttled": "dark-red",
}

DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
RI = "$__rate_interval"
ROCE_CONGESTION = 'counter=~"np_ecn_marked_roce_packets|np_cnp_sent|rp_cnp_handled"'
ROCE_RETRANSMITS = 'counter=~"out_of_sequence|local_ack_timeout_err|packet_seq_err"'

#: Set by configure() from the configuration being built: the settings, the cluster label and
#: the selectors every query starts with.
CONFIG: dict = {}
CL = "cluster"
NODE = GPU = OWNER = BUSY_MODES = ""


def configure(values: dict) -> None:
    global CONFIG, CL, NODE, GPU, OWNER, BUSY_MODES
    CONFIG = values
    CL = values["labels"]["cluster"]
    NODE = f'{CL}=~"$cluster", job=~"$job", instance=~"$instance"'
    GPU = NODE + ', gpu=~"$gpu"'
    OWNER = NODE + ', owner=~"$owner"'
    #: Busy as the exporter counts it: every mode but idle and iowait (iowait is idle time).
    BUSY_MODES = NODE + ', mode!~"idle|iowait"'


def setting(path: str):
    """A setting of the configuration being built (a placeholder in the chart's copy)."""
    node = CONFIG
    for part in path.split("."):
        node = node[part]
    return node


#: The uid of each dashboard, also the target of the links between them.
UIDS = {
    "triage": "gpuwait-triage",
    "data": "gpuwait-data-pipeline",
    "interconnect": "gpuwait-interconnect",
    "sync": "gpuwait-sync",
    "gpu": "gpuwait-gpu-detail",
    "exporter": "gpuwait-exporter-health",
}


def rate(metric: str, selector: str) -> str:
    return f"rate({metric}{{{selector}}}[{RI}])"


def owned(expr: str) -> str:
    """Restrict a per-GPU expression to the GPUs of the selected owners."""
    return f'({expr} and on({CL}, job, instance, gpu) gpuwait_gpu_owner_info{{{OWNER}}})'


@dataclass
class Q:
    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


@dataclass
class Board:
    """Collects panels with stable ids; a row starts a new group."""

    uid: str
    title: str
    description: str
    tags: list[str]
    builder: dashboard.Dashboard = field(init=False)
    _next_id: int = 1

    def __post_init__(self) -> None:
        self.builder = (
            dashboard.Dashboard(self.title).uid(self.uid).description(self.description)
            .tags(["gpuwait", *self.tags]).editable().time("now-1h", "now").refresh("30s")
            .timezone("browser").tooltip(model.DashboardCursorSync.CROSSHAIR)
            .variables(variables())
            .annotation(alerts_annotation())
        )
        for key, uid in UIDS.items():
            if uid != self.uid:
                self.builder.link(layer_link(key))

    def row(self, title: str) -> None:
        # An open row: its panels follow it at the top level (a collapsed row would nest them).
        self.builder.with_row(dashboard.Row(title).collapsed(False).id(self._take_id()))

    def add(self, panel) -> None:
        alerts = MIRRORS.get(panel._internal.title, ())
        if alerts:
            panel = panel.links(runbook_links(alerts))
        self.builder.with_panel(panel.id(self._take_id()).datasource(DS))

    def build(self) -> dict:
        board = json.loads(json.dumps(self.builder.build(), cls=JSONEncoder, sort_keys=True))
        for annotation in board["annotations"]["list"]:
            annotation.update(ANNOTATION_FORMAT)
        return board

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1


LINK_TITLES = {
    "triage": "Triage", "data": "Data pipeline", "interconnect": "Interconnect and network",
    "sync": "Sync and stragglers", "gpu": "GPU detail", "exporter": "Exporter health",
}


def layer_link(key: str) -> dashboard.DashboardLink:
    return (
        dashboard.DashboardLink(LINK_TITLES[key]).type(model.DashboardLinkType.LINK)
        .url(f"/d/{UIDS[key]}").include_vars(True).keep_time(True).tooltip(f"Open {LINK_TITLES[key]} with these variables")
        .target_blank(False).as_dropdown(False).icon("dashboard")
    )


def variables() -> list:
    def query(name: str, label: str, expr: str, description: str, all_value: str | None = ".*") -> dashboard.QueryVariable:
        v = (
            dashboard.QueryVariable(name).label(label).description(description).datasource(DS)
            .query(expr)
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(model.VariableSort.NATURAL_ASC)
            .multi(True).include_all(True)
            .current(model.VariableOption(selected=True, text="All", value="$__all"))
        )
        return v.all_value(all_value) if all_value is not None else v

    cluster = f'{CL}=~"$cluster"'
    return [
        dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus")
        .description("The Prometheus that scrapes the gpuwait exporters."),
        query("cluster", "Cluster", f"label_values(gpuwait_build_info, {CL})",
              f"Clusters, by the {CL} label, where one Prometheus (Thanos, Mimir) holds several; empty where none carries it."),
        # No catch-all for job: "All" stands for exactly the jobs listed (Grafana joins them into
        # a regex), so selectors on it never match series of other jobs or alerts without a job
        # (kube-prometheus-stack's Watchdog).
        query("job", "Job", f"label_values(gpuwait_build_info{{{cluster}}}, job)",
              'The scrape jobs of the gpuwait exporters: "gpuwait" for a plain scrape job or the chart\'s ServiceMonitor, '
              '"<namespace>/<name>" for a PodMonitor.', all_value=None),
        query("instance", "Node", f'label_values(gpuwait_build_info{{{cluster}, job=~"$job"}}, instance)',
              "gpuwait exporters (one per node)."),
        query("gpu", "GPU", f'label_values(gpuwait_gpu_up{{{cluster}, job=~"$job", instance=~"$instance"}}, gpu)',
              "GPU indexes on the chosen nodes."),
        query("owner", "Owner",
              f'label_values(gpuwait_gpu_owner_info{{{cluster}, job=~"$job", instance=~"$instance", gpu=~"$gpu"}}, owner)',
              "Owners (pod, Slurm job, container, unit) of processes on the chosen GPUs."),
    ]


def alerts_annotation() -> dashboard.AnnotationQuery:
    return (
        dashboard.AnnotationQuery().name("Alerts firing").datasource(DS).enable(True).hide(False)
        .icon_color("red")
        # Only alerts of the chosen gpuwait jobs and nodes: every gpuwait alert that concerns a
        # node carries both, and alerts of the rest of the stack (Watchdog has neither) stay off.
        .expr(f'ALERTS{{alertstate="firing", {NODE}}}')
    )


#: What Grafana's Prometheus annotation shows of each alert (fields the SDK's builder lacks).
ANNOTATION_FORMAT = {"titleFormat": "{{alertname}}", "textFormat": "{{instance}} GPU {{gpu}} {{owner_namespace}}/{{owner_pod}}",
                     "tagKeys": "severity,scope", "useValueForTime": False, "step": "60s"}


def targets(queries: list[Q]) -> list:
    out = []
    for i, q in enumerate(queries):
        t = prometheus.Dataquery().expr(q.expr).legend_format(q.legend or "__auto").ref_id(chr(ord("A") + i)).datasource(DS)
        t = t.instant() if q.instant else t.range()
        if q.table:
            t = t.format(prometheus_model.PromQueryFormat.TABLE)
        out.append(t)
    return out


def describe(text: str, claims: str) -> str:
    return f"{text} Serves {claims}."


#: A threshold line: (colour, setting path of mixin/config.yml); drawn where the alerts draw it.
Line = tuple[str, str]

#: The alerts each panel mirrors (it shows the series the alert fires on); the panel links to
#: their runbooks, and every alert has at least one such panel (tests/test_dashboards.py).
MIRRORS: dict[str, tuple[str, ...]] = {
    "Utilization next to SM activity": ("GpuUnderutilized",),
    "Wait attribution, per node": ("GpuWaitingOnDataPipeline", "GpuWaitingOnStorage", "GpuWaitingOnHostTransfer",
                                   "GpuWaitingOnNetwork", "GpuInsufficientWork"),
    "Verdict per GPU": ("GpuSyncStraggler", "GpuThrottled"),
    "Utilization vs disk queue depth": ("GpuWaitingOnStorage",),
    "Utilization vs read latency": ("GpuWaitingOnStorage",),
    "Read request size": ("GpuWaitingOnStorage",),
    "NFS operation latency": ("GpuWaitingOnStorage",),
    "NFS metadata share": ("GpuWaitingOnStorage",),
    "Saturated cores next to the mean": ("GpuWaitingOnDataPipeline",),
    "PSI: share of time stalled": ("GpuWaitingOnDataPipeline",),
    "Data-side wait seen from the GPU": ("GpuWaitingOnDataPipeline", "GpuWaitingOnStorage"),
    "PCIe throughput vs link capacity": ("GpuWaitingOnHostTransfer",),
    "Current vs maximum link": ("GpuPcieLinkDegraded",),
    "PCIe links: current vs max generation and width": ("GpuPcieLinkDegraded",),
    "Link correlation with GPU activity": ("GpuWaitingOnNetwork",),
    "Dip period": ("GpuWaitingOnNetwork",),
    "Dip periodicity": ("GpuWaitingOnNetwork",),
    "RDMA ports active": ("RdmaPortNotActive",),
    "ECN marks and CNPs": ("RdmaRoceCongestion",),
    "RoCE retransmissions": ("RdmaRoceRetransmits",),
    "Transmit wait (credit starvation)": ("RdmaInfinibandCongestion",),
    "Link errors": ("RdmaInfinibandLinkErrors",),
    "GPU–NIC PCIe relation": ("GpuNicAffinityMismatch",),
    "Straggler GPU": ("GpuSyncStraggler",),
    "Collectives that do not end": ("GpuCollectiveStalled",),
    "Time waiting on a peer": ("GpuSyncStraggler",),
    "Mean utilization per node of the owner": ("GpuSyncStraggler",),
    "The straggling node (recorded)": ("GpuSyncStraggler",),
    "Clock-event reasons": ("GpuThrottled",),
    "GPU up": ("GpuLost", "GpuCountDropped"),
    "XID errors": ("GpuLost",),
    "Targets up": ("GpuwaitExporterDown", "GpuwaitExporterAbsent"),
    "Source up": ("GpuwaitSourceDown",),
    "Source errors": ("GpuwaitSourceDown",),
    "Sampler lag": ("GpuwaitSamplerOverruns",),
    "Skipped reads": ("GpuwaitSamplerOverruns",),
}

#: Threshold lines per panel: refId ("" for every query) -> lines, at the values the alerts use.
LINES: dict[str, dict[str, list[Line]]] = {
    "Utilization next to SM activity": {"A": [("orange", "underutilized.utilization"), ("green", "impact.utilization_target")]},
    "Wait attribution, per node": {"": [("orange", "wait.min_ratio")]},
    "Utilization vs disk queue depth": {"B": [("orange", "storage.queue_depth")]},
    "Utilization vs read latency": {"B": [("orange", "storage.read_await_seconds")]},
    "Read request size": {"": [("purple", "storage.small_request_bytes")]},
    "NFS operation latency": {"": [("orange", "storage.nfs_execute_seconds")]},
    "NFS metadata share": {"": [("purple", "storage.nfs_metadata_ratio")]},
    "Saturated cores next to the mean": {"A": [("orange", "data_pipeline.saturated_cores")]},
    "PSI: share of time stalled": {"": [("orange", "data_pipeline.cpu_pressure_ratio")]},
    "Dip periodicity": {"": [("orange", "network.min_periodicity")]},
    "ECN marks and CNPs": {"": [("orange", "rdma.roce_cnp_per_second")]},
    "RoCE retransmissions": {"": [("orange", "rdma.roce_retransmits_per_second")]},
    "Transmit wait (credit starvation)": {"": [("orange", "rdma.ib_xmit_wait_ticks_per_second")]},
    "Time waiting on a peer": {"": [("orange", "straggler.barrier_wait_ratio")]},
    "The straggling node (recorded)": {"A": [("orange", "straggler.busy_gap")], "B": [("orange", "straggler.barrier_wait_ratio")]},
    "Clock-event reasons": {"B": [("orange", "throttled.busy_ratio")]},
}


def _steps(lines: list[Line]) -> list[model.Threshold]:
    return [model.Threshold(value=None, color="transparent"), *(model.Threshold(value=setting(path), color=colour) for colour, path in lines)]


def ts(title: str, text: str, claims: str, unit: str, queries: list[Q], *, w: int = 12, h: int = 8,
       stacked: bool = False, right: dict[str, str] | None = None, minimum: float | None = None,
       maximum: float | None = None, bars: bool = False,
       lines: dict[str, list[Line]] | None = None) -> timeseries.Panel:
    """A time series panel; ``right`` maps a query's refId to the unit of a second, right-hand axis;
    ``lines`` maps a refId ("" for every query) to its threshold lines."""
    p = (
        timeseries.Panel().title(title).description(describe(text, claims)).unit(unit).span(w).height(h)
        .targets(targets(queries)).fill_opacity(25 if stacked else 8).line_width(1)
        .legend(common_builders.VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.TABLE)
                .placement(common.LegendPlacement.RIGHT).calcs(["mean", "max"]))
        .tooltip(common_builders.VizTooltipOptions().mode(common.TooltipDisplayMode.MULTI).sort(common.SortOrder.DESCENDING))
    )
    if stacked:
        p = p.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL))
    if bars:
        p = p.draw_style(common.GraphDrawStyle.BARS)
    if minimum is not None:
        p = p.min(minimum)
    if maximum is not None:
        p = p.max(maximum)
    lines = dict(lines if lines is not None else LINES.get(title, {}))
    if "" in lines:
        p = (p.thresholds(dashboard.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(_steps(lines.pop(""))))
             .thresholds_style(common_builders.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)))
    for ref in sorted(set(right or {}) | set(lines)):
        values = []
        if ref in (right or {}):
            values += [
                model.DynamicConfigValue(id_val="unit", value=right[ref]),
                model.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                model.DynamicConfigValue(id_val="max", value=None),
            ]
        if ref in lines:
            values += [
                model.DynamicConfigValue(id_val="thresholds", value=model.ThresholdsConfig(
                    mode=model.ThresholdsMode.ABSOLUTE, steps=_steps(lines[ref]))),
                model.DynamicConfigValue(id_val="custom.thresholdsStyle", value={"mode": "dashed"}),
            ]
        p = p.override_by_query(ref, values)
    return p


def tbl(title: str, text: str, claims: str, unit: str, queries: list[Q], *, w: int = 12, h: int = 8) -> table.Panel:
    return (
        table.Panel().title(title).description(describe(text, claims)).unit(unit).span(w).height(h)
        .targets(targets([Q(q.expr, q.legend, instant=True, table=True) for q in queries]))
        .with_transformation(model.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(model.DataTransformerConfig(id_val="organize", options={
            "excludeByName": {"Time": True, "__name__": True, "job": True}}))
    )


def runbook_links(alerts: tuple[str, ...]) -> list[dashboard.DashboardLink]:
    """Links to the runbooks of the alerts a panel mirrors (docs/runbooks/<alert>.md)."""
    base = str(setting("runbook_url_base")).rstrip("/")
    return [dashboard.DashboardLink(f"Runbook: {name}").type(model.DashboardLinkType.LINK).url(f"{base}/{name}.md")
            .target_blank(True).tooltip(f"What {name} means, how to confirm it, what to fix").icon("doc")
            for name in alerts]


def cause_mappings() -> list:
    return [
        model.ValueMap(options={str(i): model.ValueMappingResult(text=c, color=CAUSE_COLORS[c], index=i)
                                for i, c in enumerate(CAUSES)})
    ]


def verdict_code(selector: str, metric: str = "gpuwait_gpu_verdict", by: str = "instance, gpu") -> str:
    """One number per GPU naming its verdict (the index into CAUSES), for a state timeline."""
    by = f"{CL}, {by}"
    terms = " or ".join(f'({metric}{{{selector}, cause="{c}"}} == 1) * {i}' for i, c in enumerate(CAUSES))
    return f"sum by ({by}) ({terms})"


# -- dashboards ---------------------------------------------------------------------------------

def triage() -> dict:
    b = Board(UIDS["triage"], "gpuwait / Triage",
              "Where to start: is there impact, is the GPU computing or waiting, and what for (A14). "
              "The links above open each layer with the same nodes, GPUs and owners.", ["triage"])
    b.row("1. Impact: is anyone waiting for these GPUs? (A1, A13)")
    b.add(ts("Demand", "1 when the GPU has an owner active on the CPU or waiting on IO; low utilization "
             "with demand 0 needs no fix.", "A1, A13", "none",
             [Q(f"gpuwait_gpu_demand{{{GPU}}}", "{{instance}} GPU {{gpu}}")], w=8, minimum=0, maximum=1))
    b.add(ts("Workload throughput", "Steps, samples and requests per second as the job reports them "
             "(gpuwait.workload); a drop with low utilization is impact.", "A1, A8, A13", "reqps",
             [Q(f"gpuwait_workload_window_steps_per_second{{{OWNER}}}", "{{instance}} {{owner}} steps/s"),
              Q(f"gpuwait_workload_window_requests_per_second{{{OWNER}}}", "{{instance}} {{owner}} requests/s")], w=8))
    b.add(ts("GPU-equivalents idle by cause, per node", "The idle fractions of a node's GPUs summed, by cause "
             "(4 GPUs idle half the time make 2).", "A14", "short",
             [Q(f"sum by ({CL}, instance, cause) (gpuwait_node_idle_gpus{{{NODE}}})", "{{instance}} {{cause}}")],
             w=8, stacked=True))
    b.row("2. Computing or waiting? (A1, A4, A14)")
    b.add(ts("Utilization next to SM activity", "The driver's utilization says a kernel ran; SM activity "
             "says how much of the GPU it used. High utilization with low SM activity is small work (A4).",
             "A1, A4, A14", "percentunit",
             [Q(f"gpuwait_gpu_window_utilization_mean_ratio{{{GPU}}}", "{{instance}} GPU {{gpu}} utilization"),
              Q(f"gpuwait_gpu_window_sm_active_mean_ratio{{{GPU}}}", "{{instance}} GPU {{gpu}} SM active")],
             minimum=0, maximum=1))
    b.add(ts("Idle fraction and the dips a mean hides", "Share of the window's samples below the idle "
             "threshold, next to the 10th percentile of utilization.", "A4, A12, A14", "percentunit",
             [Q(f"gpuwait_gpu_window_idle_ratio{{{GPU}}}", "{{instance}} GPU {{gpu}} idle"),
              Q(f"gpuwait_gpu_window_utilization_p10_ratio{{{GPU}}}", "{{instance}} GPU {{gpu}} p10")],
             minimum=0, maximum=1))
    b.row("3. Waiting for what? (A14)")
    b.add(statetimeline.Panel().title("Verdict per GPU").description(describe(
        "What each GPU waited for over the exporter's window: data_pipeline, storage, host_transfer, "
        "network, sync, insufficient_work, throttled, or none (busy, or idle without demand).", "A14"))
        .unit("none").span(24).height(10).mappings(cause_mappings()).show_value(common.VisibilityMode.NEVER)
        .merge_values(True).row_height(0.8)
        .color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
        .targets(targets([Q(verdict_code(GPU), "{{instance}} GPU {{gpu}}")])))
    b.add(ts("Wait attribution, per node", "Fraction of the window the selected GPUs sat idle, by the cause "
             "the concurrent evidence points to; the causes add up to the idle fraction.",
             "A2, A4, A6, A9, A12, A14", "percentunit",
             [Q(f'avg by ({CL}, instance, cause) (gpuwait_gpu_wait_ratio{{{GPU}}})', "{{instance}} {{cause}}")],
             stacked=True, minimum=0, maximum=1))
    b.add(bargauge.Panel().title("Top causes across the fleet").description(describe(
        "GPU-equivalents idle by cause over all selected nodes, largest first: where the fleet's idle "
        "GPU time goes.", "A14")).unit("short").span(12).height(8)
        .orientation(common.VizOrientation.HORIZONTAL).display_mode(common.BarGaugeDisplayMode.GRADIENT)
        .targets(targets([Q(f"sort_desc(sum by (cause) (gpuwait_node_idle_gpus{{{NODE}}}))", "{{cause}}", instant=True)])))
    b.add(statetimeline.Panel().title("Node verdict").description(describe(
        "What most of each node's GPUs waited for.", "A14"))
        .unit("none").span(24).height(6).mappings(cause_mappings()).show_value(common.VisibilityMode.NEVER)
        .merge_values(True).color_scheme(dashboard.FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
        .targets(targets([Q(verdict_code(NODE, "gpuwait_node_verdict", "instance"), "{{instance}}")])))
    return b.build()


def data_pipeline() -> dict:
    b = Board(UIDS["data"], "gpuwait / Data pipeline",
              "CPU-side preparation, storage and NFS next to GPU utilization (A2, A3, A6, A7, A8).", ["data"])
    util = Q(f"avg by ({CL}, instance) (gpuwait_gpu_utilization_ratio{{{GPU}}})", "{{instance}} GPU utilization")
    b.row("Storage: queue and latency against utilization (A6, A7)")
    b.add(ts("Utilization vs disk queue depth", "GPU utilization (left) overlaid with the average number of "
             "requests in flight (right): a queue that grows exactly while the GPUs idle.", "A6, A7", "percentunit",
             [util, Q(rate("gpuwait_disk_io_time_weighted_seconds_total", NODE), "{{instance}} {{device}} queue depth")],
             right={"B": "short"}, minimum=0))
    b.add(ts("Utilization vs read latency", "GPU utilization (left) and the mean time from issue to completion "
             "of reads (right).", "A6, A7", "percentunit",
             [util, Q(f"{rate('gpuwait_disk_read_time_seconds_total', NODE)} / {rate('gpuwait_disk_reads_completed_total', NODE)}",
                      "{{instance}} {{device}} read latency")],
             right={"B": "s"}, minimum=0))
    b.row("Storage regime: IOPS vs bytes/s vs request size (A7)")
    b.add(ts("Read IOPS", "Reads completed per second.", "A6, A7", "iops",
             [Q(rate("gpuwait_disk_reads_completed_total", NODE), "{{instance}} {{device}}")], w=8))
    b.add(ts("Read throughput", "Bytes read per second.", "A6, A7", "Bps",
             [Q(rate("gpuwait_disk_read_bytes_total", NODE), "{{instance}} {{device}}")], w=8))
    b.add(ts("Read request size", "Bytes per read: large for sequential streaming (throughput-bound), small "
             "for many small files or random access (IOPS- and metadata-bound).", "A7", "bytes",
             [Q(f"{rate('gpuwait_disk_read_bytes_total', NODE)} / {rate('gpuwait_disk_reads_completed_total', NODE)}",
                "{{instance}} {{device}}")], w=8))
    b.row("CPU: per core, not the average (A2, A3)")
    b.add(heatmap.Panel().title("Busy fraction per core").description(describe(
        "Each row one core, colour its busy share: one or two pinned cores (a decode thread) show here and "
        "vanish in a mean.", "A2, A3")).unit("percentunit").span(12).height(10).calculate(False)
        .color(heatmap.HeatmapColorOptions().mode(heatmap_model.HeatmapColorMode.SCHEME).scheme("Oranges")
               .min(0).max(1).exponent(0.5).fill("dark-orange").scale(heatmap_model.HeatmapColorScale.EXPONENTIAL).steps(64))
        .y_axis(heatmap.YAxisConfig().unit("none"))
        .cell_values(heatmap.CellValues().unit("percentunit"))
        .targets(targets([Q(f"sum by ({CL}, instance, cpu) ({rate('gpuwait_cpu_seconds_total', BUSY_MODES)})",
                            "{{instance}} cpu{{cpu}}")])))
    b.add(ts("Saturated cores next to the mean", "Cores busy nearly all the window (left) beside the mean and "
             "busiest core's busy fraction (right).", "A2, A3", "short",
             [Q(f"gpuwait_cpu_window_saturated_cores{{{NODE}}}", "{{instance}} saturated cores"),
              Q(f"gpuwait_cpu_window_busy_mean_ratio{{{NODE}}}", "{{instance}} mean busy"),
              Q(f"gpuwait_cpu_window_busy_max_ratio{{{NODE}}}", "{{instance}} busiest core")],
             right={"B": "percentunit", "C": "percentunit"}, minimum=0))
    b.add(ts("Owner threads by state", "The job's host threads: running (R) vs blocked on IO (D) says whether "
             "the loader computes or waits.", "A2, A3, A6", "short",
             [Q(f"sum by ({CL}, instance, owner, state) (gpuwait_gpu_owner_threads{{{OWNER}, state=~\"running|blocked\"}})",
                "{{instance}} {{state}}")], w=8))
    b.add(ts("Owner CPU use (cores)", "CPU seconds per second of the owner's host processes.", "A2, A3", "short",
             [Q(f"sum by ({CL}, instance, owner) ({rate('gpuwait_gpu_owner_cpu_seconds_total', OWNER)})", "{{instance}} {{owner}}")], w=8))
    b.add(ts("Run queue and blocked tasks", "Runnable tasks and tasks in uninterruptible IO wait.", "A3, A6", "short",
             [Q(f"gpuwait_procs_window_running_mean{{{NODE}}}", "{{instance}} runnable"),
              Q(f"gpuwait_procs_window_blocked_mean{{{NODE}}}", "{{instance}} blocked")], w=8))
    b.row("Pressure stall information (A2, A6)")
    b.add(ts("PSI: share of time stalled", "Fraction of time tasks stalled on CPU, IO or memory (some: at "
             "least one, full: all at once).", "A2, A6", "percentunit",
             [Q(rate("gpuwait_pressure_stalled_seconds_total", NODE), "{{instance}} {{resource}} {{scope}}")], minimum=0))
    b.add(ts("PSI: worst sample interval", "Largest stalled fraction of any one sample interval in the window: "
             "short stalls the averages smooth away.", "A2, A6", "percentunit",
             [Q(f"gpuwait_pressure_window_stalled_max_ratio{{{NODE}}}", "{{instance}} {{resource}} {{scope}}")], minimum=0))
    b.row("NFS (A6, A7)")
    b.add(ts("NFS operation latency", "Mean time from start to completion of each NFS operation (client "
             "queue, network, server).", "A6", "s",
             [Q(f"{rate('gpuwait_nfs_execute_seconds_total', NODE)} / {rate('gpuwait_nfs_operations_total', NODE)}",
                "{{instance}} {{mount}} {{op}}")], w=8))
    b.add(ts("NFS operations per second", "Completed operations by kind.", "A6, A7", "ops",
             [Q(rate("gpuwait_nfs_operations_total", NODE), "{{instance}} {{mount}} {{op}}")], w=8))
    b.add(ts("NFS metadata share", "Share of operations that carry no file data (GETATTR, LOOKUP, ACCESS, OPEN): "
             "near 1 means many small files.", "A6, A7", "percentunit",
             [Q(f"gpuwait_nfs_window_metadata_ratio{{{NODE}}}", "{{instance}} {{mount}}")], w=8, minimum=0, maximum=1))
    b.row("Data wait vs compute, as the workload reports it (A8)")
    b.add(ts("Data wait vs compute per step", "Share of the job's time spent waiting for the next batch vs "
             "computing, measured inside the training loop (gpuwait.workload); the reliable comparison.",
             "A8", "percentunit",
             [Q(f"gpuwait_workload_window_data_wait_ratio{{{OWNER}}}", "{{instance}} {{owner}} data wait"),
              Q(f"gpuwait_workload_window_compute_ratio{{{OWNER}}}", "{{instance}} {{owner}} compute")],
             stacked=True, minimum=0, maximum=1))
    b.add(ts("Data-side wait seen from the GPU", "The exporter's own estimate when the job reports nothing: "
             "idle share given to data_pipeline and storage, next to the busy share.", "A2, A6, A8", "percentunit",
             [Q(f'avg by ({CL}, instance, cause) (gpuwait_gpu_wait_ratio{{{GPU}, cause=~"data_pipeline|storage"}})',
                "{{instance}} waiting: {{cause}}"),
              Q(f"avg by ({CL}, instance) (1 - gpuwait_gpu_window_idle_ratio{{{GPU}}})", "{{instance}} computing")],
             stacked=True, minimum=0, maximum=1))
    return b.build()


def interconnect() -> dict:
    b = Board(UIDS["interconnect"], "gpuwait / Interconnect and network",
              "PCIe, NVLink, NICs and RDMA next to GPU utilization; RoCE and InfiniBand apart (A9, A10, A11).",
              ["interconnect", "network"])
    b.row("PCIe (A9)")
    b.add(ts("PCIe throughput vs link capacity", "Bytes/s each way through each GPU's link, against what the "
             "link carries at its current generation and width.", "A9", "Bps",
             [Q(f"sum by ({CL}, instance, gpu, direction) ({rate('gpuwait_gpu_pcie_bytes_total', GPU)})", "{{instance}} GPU {{gpu}} {{direction}}"),
              Q(f"gpuwait_gpu_pcie_link_capacity_bytes_per_second{{{GPU}}}", "{{instance}} GPU {{gpu}} capacity")]))
    b.add(ts("Current vs maximum link", "Current generation and width as a share of the maximum the GPU and "
             "slot reach together: below 1 under load is a downtrained link.", "A9", "percentunit",
             [Q(f"gpuwait_gpu_pcie_link_generation{{{GPU}}} / gpuwait_gpu_pcie_link_max_generation{{{GPU}}}",
                "{{instance}} GPU {{gpu}} generation"),
              Q(f"gpuwait_gpu_pcie_link_width{{{GPU}}} / gpuwait_gpu_pcie_link_max_width{{{GPU}}}", "{{instance}} GPU {{gpu}} width")],
             minimum=0, maximum=1))
    b.add(tbl("PCIe links: current vs max generation and width", "Per GPU, the link's current and maximum "
              "generation and width.", "A9", "none",
              [Q(f"gpuwait_gpu_pcie_link_generation{{{GPU}}}"), Q(f"gpuwait_gpu_pcie_link_max_generation{{{GPU}}}"),
               Q(f"gpuwait_gpu_pcie_link_width{{{GPU}}}"), Q(f"gpuwait_gpu_pcie_link_max_width{{{GPU}}}")], w=24, h=7))
    b.row("NVLink (A9, A10)")
    b.add(ts("NVLink throughput per link", "Data bytes per second through each NVLink link by direction.", "A9, A10", "Bps",
             [Q(rate("gpuwait_gpu_nvlink_bytes_total", GPU), "{{instance}} GPU {{gpu}} link {{link}} {{direction}}")]))
    b.add(ts("NVLink links up", "1 when a link is active; a link down halves a ring's bandwidth.", "A9, A10", "none",
             [Q(f"gpuwait_gpu_nvlink_up{{{GPU}}}", "{{instance}} GPU {{gpu}} link {{link}}")], minimum=0, maximum=1))
    b.row("Network traffic on the same time axis as utilization (A9, A10)")
    b.add(ts("Utilization vs NIC and RDMA traffic", "GPU utilization (left) and receive throughput of NICs and "
             "RDMA ports (right): collectives show as bursts exactly in the utilization dips.", "A9, A10", "percentunit",
             [Q(f"avg by ({CL}, instance) (gpuwait_gpu_utilization_ratio{{{GPU}}})", "{{instance}} GPU utilization"),
              Q(rate("gpuwait_network_receive_bytes_total", NODE), "{{instance}} {{interface}} rx"),
              Q(rate("gpuwait_rdma_port_receive_bytes_total", NODE), "{{instance}} {{device}}:{{port}} rx ({{link_layer}})")],
             w=24, right={"B": "Bps", "C": "Bps"}, minimum=0))
    b.add(ts("RDMA throughput vs port rate", "Transmit and receive bytes/s per RDMA port against its negotiated "
             "rate.", "A9, A10, A11", "Bps",
             [Q(rate("gpuwait_rdma_port_transmit_bytes_total", NODE), "{{instance}} {{device}}:{{port}} tx"),
              Q(rate("gpuwait_rdma_port_receive_bytes_total", NODE), "{{instance}} {{device}}:{{port}} rx"),
              Q(f"gpuwait_rdma_port_rate_bytes_per_second{{{NODE}}}", "{{instance}} {{device}}:{{port}} rate")]))
    b.add(ts("RDMA ports active", "1 while a port's logical state is ACTIVE; a port that was ACTIVE and is not any "
             "more takes its collectives with it or sends them down a slower path.", "A10, A11", "none",
             [Q(f"gpuwait_rdma_port_active{{{NODE}}}", "{{instance}} {{device}}:{{port}} ({{link_layer}})")],
             minimum=0, maximum=1))
    b.add(ts("Link correlation with GPU activity", "Correlation between each GPU's activity and each link's "
             "traffic at the sampling rate: strongly negative means the link bursts in the GPU's dips.",
             "A9, A10, A11", "none",
             [Q(f"avg by ({CL}, instance, link, link_kind, link_layer) (gpuwait_gpu_link_correlation{{{GPU}}})",
                "{{instance}} {{link}} ({{link_kind}} {{link_layer}})")], minimum=-1, maximum=1))
    b.add(ts("Dip period", "Period of each GPU's repeating utilization dips (one training step when "
             "collectives cause them).", "A9, A10", "s",
             [Q(f"gpuwait_gpu_dip_period_seconds{{{GPU}}}", "{{instance}} GPU {{gpu}}")]))
    b.add(ts("Dip periodicity", "How cleanly the dips repeat: near 1 a strict rhythm, near 0 noise.", "A9, A10",
             "percentunit", [Q(f"gpuwait_gpu_dip_periodicity_ratio{{{GPU}}}", "{{instance}} GPU {{gpu}}")],
             minimum=0, maximum=1))
    b.row('RoCE congestion (link_layer="Ethernet") (A11)')
    roce = NODE + ', link_layer="Ethernet"'
    b.add(ts("ECN marks and CNPs", "RoCE congestion control at work: packets marked by switches (ECN) and "
             "congestion notification packets sent and handled.", "A10, A11", "pps",
             [Q(f"sum by ({CL}, instance, device, counter) ({rate('gpuwait_rdma_port_hw_events_total', roce + ', ' + ROCE_CONGESTION)})",
                "{{instance}} {{device}} {{counter}}")]))
    b.add(ts("RoCE retransmissions", "Out-of-sequence packets and ACK timeouts: losses that cost a "
             "retransmission.", "A10, A11", "pps",
             [Q(f"sum by ({CL}, instance, device, counter) ({rate('gpuwait_rdma_port_hw_events_total', roce + ', ' + ROCE_RETRANSMITS)})",
                "{{instance}} {{device}} {{counter}}")]))
    b.row('InfiniBand errors and back-pressure (link_layer="InfiniBand") (A11)')
    ib = NODE + ', link_layer="InfiniBand"'
    b.add(ts("Transmit wait (credit starvation)", "Ticks per second a port had data but no flow-control "
             "credits: fabric congestion.", "A10, A11", "short",
             [Q(rate("gpuwait_rdma_port_transmit_wait_ticks_total", ib), "{{instance}} {{device}}:{{port}}")]))
    b.add(ts("Link errors", "Symbol errors, receive errors, transmit discards and link recoveries per second.",
             "A10, A11", "cps",
             [Q(rate("gpuwait_rdma_port_symbol_errors_total", ib), "{{instance}} {{device}} symbol"),
              Q(rate("gpuwait_rdma_port_receive_errors_total", ib), "{{instance}} {{device}} receive"),
              Q(rate("gpuwait_rdma_port_transmit_discards_total", ib), "{{instance}} {{device}} xmit discard"),
              Q(rate("gpuwait_rdma_port_link_downed_total", ib), "{{instance}} {{device}} link downed")]))
    b.row("GPU–NIC affinity (A9, A10)")
    b.add(tbl("GPU–NIC PCIe relation", "For each GPU and RDMA device, the nearest common PCIe ancestor: PIX or "
              "PXB suits GPUDirect RDMA, NODE or SYS crosses the CPU.", "A9, A10", "none",
              [Q(f"gpuwait_gpu_nic_topology_info{{{GPU}}}")], w=12))
    b.add(tbl("NUMA placement of GPUs and RDMA devices", "NUMA node of each GPU and each RDMA device.", "A9, A10", "none",
              [Q(f"gpuwait_gpu_info{{{GPU}}}"), Q(f"gpuwait_rdma_device_info{{{NODE}}}")], w=12))
    return b.build()


def sync() -> dict:
    b = Board(UIDS["sync"], "gpuwait / Sync and stragglers",
              "Load balance of one job across its GPUs and nodes; who the others wait for (A12).", ["sync"])
    util = f"gpuwait_gpu_window_utilization_mean_ratio{{{GPU}}}"
    b.row("Across the GPUs of one owner on a node (A12)")
    b.add(ts("Utilization spread within each node", "Busiest minus least busy GPU of the selected owners on "
             "each node: a wide spread with one GPU high is a straggler the others wait for.", "A12", "percentunit",
             [Q(f"max by ({CL}, instance) {owned(util)} - min by ({CL}, instance) {owned(util)}", "{{instance}} spread")], minimum=0))
    b.add(ts("Utilization per GPU of the owner", "Each GPU's mean utilization over the window.", "A12", "percentunit",
             [Q(owned(util), "{{instance}} GPU {{gpu}}")], minimum=0, maximum=1))
    b.add(ts("Straggler GPU", "1 for the GPU its owner's other GPUs wait for at the barrier.", "A12", "none",
             [Q(f"gpuwait_gpu_straggler{{{GPU}}}", "{{instance}} GPU {{gpu}}")], minimum=0, maximum=1))
    b.add(ts("Time waiting on a peer", "Share of the window each GPU idled while a peer GPU of the same owner "
             "still computed.", "A12", "percentunit",
             [Q(f'gpuwait_gpu_wait_ratio{{{GPU}, cause="sync"}}', "{{instance}} GPU {{gpu}}")], minimum=0, maximum=1))
    b.add(ts("Collectives that do not end", "1 for a GPU whose kernel stays resident with few SMs active, its "
             "memory resting and no bytes over NVLink or PCIe: its ranks wait for a peer that never joins. The "
             "GPU of the job that is not at 1 is where the missing rank runs.", "A9, A12", "none",
             [Q(f"gpuwait_gpu_collective_stalled{{{GPU}}}", "{{instance}} GPU {{gpu}}")], minimum=0, maximum=1))
    b.row("Across nodes of one job (A12)")
    per_node = f"avg by ({CL}, job, instance, owner) ({owned(util)} * on({CL}, job, instance, gpu) group_left(owner) max by ({CL}, job, instance, gpu, owner) (gpuwait_gpu_owner_info{{{OWNER}}}))"
    b.add(ts("Mean utilization per node of the owner", "The owner's GPUs averaged per node: the node that "
             "computes longest is the one the others wait for.", "A12", "percentunit",
             [Q(per_node, "{{instance}} {{owner}}")], minimum=0, maximum=1))
    recorded = "workload_instance:gpuwait_gpu_window_utilization_mean_ratio"
    workload = f"{CL}, namespace, job, workload"
    b.add(ts("Utilization spread across nodes", "Busiest minus least busy node of each workload: the owners on "
             "every node grouped as the cross-node rules group them (a Kubernetes job's worker pods, one per "
             "node, by their controlling owner; a Slurm job by its id).", "A12", "percentunit",
             [Q(f"max by ({workload}) ({recorded}:avg{{{NODE}}}) - min by ({workload}) ({recorded}:avg{{{NODE}}})",
                "{{workload}}")], minimum=0))
    b.add(ts("The straggling node (recorded)", "Each node's mean utilization minus the mean of the workload's "
             "other nodes, and how long those others waited at the barrier, from the cross-node recording "
             "rules (alerts/gpuwait-recording-rules.yml) that GpuSyncStraggler fires on: the node far above "
             "the rest is the one they wait for.", "A12", "percentunit",
             [Q(f"{recorded}:avg{{{NODE}}} - {recorded}:avg_other_instances{{{NODE}}}", "{{instance}} {{workload}} above the rest"),
              Q(f"workload_instance:gpuwait_gpu_barrier_wait_ratio:avg_other_instances{{{NODE}}}",
                "{{instance}} {{workload}} others' barrier wait")], w=24))
    return b.build()


def gpu_detail() -> dict:
    b = Board(UIDS["gpu"], "gpuwait / GPU detail",
              "Memory capacity and bandwidth apart, clocks and why they are held, power, temperature, XIDs (A5, A14).",
              ["gpu"])
    b.row("Memory: capacity and bandwidth are different things (A5)")
    b.add(ts("Memory capacity used", "Device memory allocated against the total: says nothing about bandwidth.",
             "A5", "bytes",
             [Q(f"gpuwait_gpu_memory_used_bytes{{{GPU}}}", "{{instance}} GPU {{gpu}} used"),
              Q(f"gpuwait_gpu_memory_total_bytes{{{GPU}}}", "{{instance}} GPU {{gpu}} total")], minimum=0))
    b.add(ts("Memory bandwidth in use", "Memory-controller busy fraction and DRAM bandwidth relative to the "
             "peak: the bandwidth side, independent of capacity.", "A5", "percentunit",
             [Q(f"gpuwait_gpu_window_memory_busy_mean_ratio{{{GPU}}}", "{{instance}} GPU {{gpu}} controller busy"),
              Q(f"gpuwait_gpu_window_dram_active_mean_ratio{{{GPU}}}", "{{instance}} GPU {{gpu}} DRAM active")],
             minimum=0, maximum=1))
    b.row("Clocks and why they are held (A14)")
    b.add(ts("Clocks", "SM and memory clocks.", "A14", "hertz",
             [Q(f"gpuwait_gpu_clock_hertz{{{GPU}}}", "{{instance}} GPU {{gpu}} {{clock}}")]))
    b.add(ts("Clock-event reasons", "Share of the window each clock-event reason held: power and thermal "
             "reasons while busy mean the GPU is slowed, gpu_idle is benign.", "A14", "percentunit",
             [Q(f'gpuwait_gpu_window_clocks_event_ratio{{{GPU}}} > 0', "{{instance}} GPU {{gpu}} {{reason}}"),
              Q(f"gpuwait_gpu_throttled_busy_ratio{{{GPU}}}", "{{instance}} GPU {{gpu}} throttled while busy")],
             minimum=0, maximum=1))
    b.add(ts("Time held below requested clocks", "Share of time the driver held clocks down, by policy.", "A14",
             "percentunit",
             [Q(rate("gpuwait_gpu_clocks_violation_seconds_total", GPU), "{{instance}} GPU {{gpu}} {{policy}}")], minimum=0))
    b.row("Power, temperature, errors (A14)")
    b.add(ts("Power", "Board power draw against the enforced limit.", "A14", "watt",
             [Q(f"gpuwait_gpu_power_watts{{{GPU}}}", "{{instance}} GPU {{gpu}}"),
              Q(f"gpuwait_gpu_power_limit_watts{{{GPU}}}", "{{instance}} GPU {{gpu}} limit")], w=8, minimum=0))
    b.add(ts("Temperature", "GPU die temperature.", "A14", "celsius",
             [Q(f"gpuwait_gpu_temperature_celsius{{{GPU}}}", "{{instance}} GPU {{gpu}}")], w=8))
    b.add(ts("XID errors", "Critical driver events by XID code.", "A14", "short",
             [Q(f"increase(gpuwait_gpu_xid_errors_total{{{GPU}}}[{RI}])", "{{instance}} GPU {{gpu}} XID {{xid}}")],
             w=8, bars=True, minimum=0))
    b.add(ts("GPU up", "0 when the GPU is lost (fell off the bus) or does not answer.", "A14", "none",
             [Q(f"gpuwait_gpu_up{{{GPU}}}", "{{instance}} GPU {{gpu}}")], w=12, minimum=0, maximum=1))
    b.add(ts("PCIe replays", "Retransmitted TLPs per second: a rising rate means a marginal link.", "A9, A14", "cps",
             [Q(rate("gpuwait_gpu_pcie_replays_total", GPU), "{{instance}} GPU {{gpu}}")], w=12, minimum=0))
    return b.build()


def exporter_health() -> dict:
    b = Board(UIDS["exporter"], "gpuwait / Exporter health",
              "Is gpuwait itself reading its sources on time?", ["exporter"])
    b.row("Sources: is every input read? (A14)")
    b.add(ts("Targets up", "Prometheus reached the exporter.", "A14", "none",
             [Q(f"up{{{NODE}}}", "{{instance}}")], w=8, minimum=0, maximum=1))
    b.add(ts("Source up", "1 when the source's last read succeeded.", "A14", "none",
             [Q(f"gpuwait_source_up{{{NODE}}}", "{{instance}} {{source}}")], w=8, minimum=0, maximum=1))
    b.add(ts("Source errors", "Failed reads or parses per second, per failed part.", "A14", "cps",
             [Q(f"sum by ({CL}, instance, source) ({rate('gpuwait_source_errors_total', NODE)})", "{{instance}} {{source}}"),
              Q(f"sum by ({CL}, instance, source) ({rate('gpuwait_scrape_errors_total', NODE)})", "{{instance}} {{source}} exposition")],
             w=8, minimum=0))
    b.add(ts("GPU backend", "1 when NVML answers.", "A14", "none",
             [Q(f"gpuwait_gpu_backend_up{{{NODE}}}", "{{instance}}")], w=8, minimum=0, maximum=1))
    b.add(ts("NVML call errors", "Failed NVML calls per second by call and error.", "A14", "cps",
             [Q(f"sum by ({CL}, instance, call, error) ({rate('gpuwait_gpu_nvml_errors_total', NODE)})", "{{instance}} {{call}} {{error}}")],
             w=16, minimum=0))
    b.row("Timing: are reads on schedule? (A14)")
    b.add(ts("Read duration", "Mean wall time of one read of each source.", "A14", "s",
             [Q(f"{rate('gpuwait_source_read_seconds_total', NODE)} / {rate('gpuwait_source_reads_total', NODE)}",
                "{{instance}} {{source}}")], minimum=0))
    b.add(ts("Sampler lag", "Largest delay of a read behind its schedule over the window, against the "
             "source's interval.", "A14", "s",
             [Q(f"gpuwait_sampler_lag_seconds{{{NODE}}}", "{{instance}} {{source}} lag"),
              Q(f"gpuwait_source_interval_seconds{{{NODE}}}", "{{instance}} {{source}} interval")], minimum=0))
    b.add(ts("Skipped reads", "Scheduled reads skipped because the previous one still ran.", "A14", "cps",
             [Q(f"sum by ({CL}, instance, source) ({rate('gpuwait_sampler_overruns_total', NODE)})", "{{instance}} {{source}}")],
             w=8, minimum=0))
    b.add(ts("Analysis and scrape duration", "Wall time of one analysis pass and of one scrape.", "A14", "s",
             [Q(f"gpuwait_analysis_duration_seconds{{{NODE}}}", "{{instance}} analysis"),
              Q(f"scrape_duration_seconds{{{NODE}}}", "{{instance}} scrape")], w=8, minimum=0))
    b.add(ts("Samples in the window", "Samples of each source held for analysis.", "A14", "short",
             [Q(f"gpuwait_window_samples{{{NODE}}}", "{{instance}} {{source}}")], w=8, minimum=0))
    return b.build()


DASHBOARDS = {
    "triage": triage, "data-pipeline": data_pipeline, "interconnect": interconnect,
    "sync": sync, "gpu-detail": gpu_detail, "exporter-health": exporter_health,
}


def build_all(values: dict | None = None) -> dict[str, str]:
    """File name -> JSON text, exactly as committed (mixin/config.yml unless ``values``)."""
    configure(values if values is not None else mixin.load())
    return {f"{name}.json": json.dumps(build(), indent=2, sort_keys=True) + "\n" for name, build in DASHBOARDS.items()}


def templated(config: dict) -> dict[str, str]:
    """The dashboards with every setting left as its <<placeholder>> (the Helm chart's copy):
    a numeric setting stands unquoted where the JSON holds a number, so the text is JSON again
    once the chart substitutes the values."""
    numeric = {path for path, value in mixin.leaves(config).items() if isinstance(value, (int, float))}
    quoted = re.compile(r'"<<(' + "|".join(re.escape(p) for p in sorted(numeric)) + r')>>"')
    return {name: quoted.sub(r"<<\1>>", text) for name, text in build_all(mixin.placeholders(config)).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=pathlib.Path, help="a file overriding settings of mixin/config.yml")
    parser.add_argument("--out", type=pathlib.Path, default=OUT, help="where the JSON goes (default: dashboards/json/)")
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 when stale")
    args = parser.parse_args(argv)
    try:
        files = build_all(mixin.load(args.config))
    except mixin.ConfigError as e:
        print(f"generate.py: {e}", file=sys.stderr)
        return 2
    on_disk = {p.name: p.read_text() for p in args.out.glob("*.json")} if args.out.is_dir() else {}
    if args.check:
        stale = sorted(n for n in files.keys() | on_disk.keys() if files.get(n) != on_disk.get(n))
        for name in stale:
            print(f"generate.py: stale: {args.out / name}", file=sys.stderr)
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in on_disk.keys() - files.keys():
        (args.out / name).unlink()
    for name, text in files.items():
        (args.out / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
