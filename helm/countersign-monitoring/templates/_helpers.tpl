{{- define "countersign-monitoring.fullname" -}}
{{- if contains "countersign" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-countersign-monitoring" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "countersign-monitoring.labels" -}}
app.kubernetes.io/name: countersign-monitoring
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: countersign
{{- with .Values.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}
