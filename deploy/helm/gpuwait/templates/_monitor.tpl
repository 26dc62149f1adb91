{{/* What the ServiceMonitor's endpoint and the PodMonitor's podMetricsEndpoint share. */}}
{{- define "gpuwait.scrapeEndpoint" -}}
{{- $m := .monitor -}}
path: /metrics
scheme: {{ include "gpuwait.scheme" .root }}
interval: {{ $m.interval }}
scrapeTimeout: {{ $m.scrapeTimeout }}
honorLabels: {{ $m.honorLabels }}
# The exporter reports on the node it runs on, so the node is the target's identity. It comes
# from service discovery rather than from an exporter flag: Prometheus already knows the pod's
# node, and outside Kubernetes the exporter needs no such setting. `instance` becomes the node
# name, stable where the pod IP:port would change with every restart and readable in alerts;
# `node` carries it under the name kube-state-metrics uses (kube_node_info, kube_pod_info), so
# gpuwait's series join those on `node`.
relabelings:
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: instance
    action: replace
  - sourceLabels: [__meta_kubernetes_pod_node_name]
    targetLabel: node
    action: replace
  {{- with $m.relabelings }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.endpoint }}
{{ toYaml . }}
{{- end }}
{{- end -}}
