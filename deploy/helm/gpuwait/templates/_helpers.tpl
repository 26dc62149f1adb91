{{/* Names and labels shared by every object of the chart. */}}

{{- define "gpuwait.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The objects' name: the release name where it already says gpuwait, else <release>-gpuwait. */}}
{{- define "gpuwait.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpuwait.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpuwait.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: exporter
{{- end -}}

{{- define "gpuwait.labels" -}}
{{ include "gpuwait.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: gpuwait
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Labels of the Prometheus Operator objects: kube-prometheus-stack's Prometheus selects them by release. */}}
{{- define "gpuwait.monitoringLabels" -}}
{{ include "gpuwait.labels" . }}
{{- with .Values.release }}
release: {{ . | quote }}
{{- end }}
{{- end -}}

{{- define "gpuwait.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The scheme Prometheus scrapes with: https once the exporter serves TLS (webConfig). */}}
{{- define "gpuwait.scheme" -}}
{{- if and .Values.webConfig.secretName .Values.webConfig.tls }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* The pods' service account: the chart's own where it creates one (podNames needs it), else
the one named in serviceAccount.name (empty: the namespace's default, no serviceAccountName). */}}
{{- define "gpuwait.serviceAccountName" -}}
{{- if and .Values.podNames.enabled .Values.serviceAccount.create -}}
{{- default (include "gpuwait.fullname" .) .Values.serviceAccount.name -}}
{{- else if .Values.podNames.enabled -}}
{{- required "podNames.enabled with serviceAccount.create=false needs serviceAccount.name: the account the ClusterRoleBinding grants nodes/pods to" .Values.serviceAccount.name -}}
{{- else -}}
{{- .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}
