{{/*
The rules and dashboards under files/ are rendered from mixin/config.yml with every setting left
as a <<section.key>> placeholder; these helpers put the chart's `mixin:` values there. The text
is never evaluated as a template: the alerts' own {{ $labels }} templates pass through as they are.
*/}}

{{/* A setting as PromQL, YAML and JSON text: integral numbers without exponent or decimals. */}}
{{- define "gpuwait.mixinValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- toString . -}}
{{- end -}}
{{- end -}}

{{/* (dict "text" TEXT "mixin" .Values.mixin "where" FILE): TEXT with every placeholder substituted. */}}
{{- define "gpuwait.mixinText" -}}
{{- $text := .text -}}
{{- range $section, $settings := .mixin -}}
{{- if kindIs "map" $settings -}}
{{- range $key, $value := $settings -}}
{{- $text = replace (printf "<<%s.%s>>" $section $key) (include "gpuwait.mixinValue" $value) $text -}}
{{- end -}}
{{- else if eq $section "runbook_url_base" -}}
{{- $text = replace (printf "<<%s>>" $section) (trimSuffix "/" (toString $settings)) $text -}}
{{- else -}}
{{- $text = replace (printf "<<%s>>" $section) (include "gpuwait.mixinValue" $settings) $text -}}
{{- end -}}
{{- end -}}
{{- if contains "<<" $text -}}
{{- fail (printf "%s: a setting is missing from mixin: %s" .where (regexFind "<<[a-z_.]+>>" $text)) -}}
{{- end -}}
{{- $text -}}
{{- end -}}
