{{/*
Countersign's named templates. The public ones take the root context of EITHER this chart or a parent
chart that lists countersign as a dependency; in a parent chart they read .Values.countersign.

  countersign.sidecar         the sidecar container, for the pod's initContainers (a native sidecar)
  countersign.volumes         the volumes it needs, for the pod's volumes
  countersign.podAnnotations  checksum/countersign-registry: a registry change rolls the pods
  countersign.podLabels       the label the metrics Service selects
  countersign.agentEnv        COUNTERSIGN_ADDR for the agent container
  countersign.agentVolumeMounts  the shared socket directory, when listen.unixSocket
*/}}

{{/* The countersign values out of a root context: this chart's, or a parent's .Values.countersign. */}}
{{- define "countersign.ctx" -}}
{{- $v := .Values -}}
{{- $app := .Chart.AppVersion -}}
{{- if and (hasKey .Values "countersign") (not (hasKey .Values "listen")) -}}
{{- $v = .Values.countersign -}}
{{- $app = (index .Subcharts "countersign").Chart.AppVersion -}}
{{- end -}}
{{- toJson (dict "Values" $v "AppVersion" $app "Release" (dict "Name" .Release.Name "Namespace" .Release.Namespace "Service" .Release.Service)) -}}
{{- end -}}

{{- define "countersign.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains "countersign" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-countersign" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "countersign.labels" -}}
app.kubernetes.io/name: countersign
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: countersign
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The registry YAML text, from a string or a mapping. */}}
{{- define "countersign.registryText" -}}
{{- if not .Values.registry -}}
policy_version: "0"
capabilities: []
tools: []
{{- else if kindIs "string" .Values.registry -}}
{{- .Values.registry -}}
{{- else -}}
{{- toYaml .Values.registry -}}
{{- end -}}
{{- end -}}

{{- define "countersign.image" -}}
{{- $tag := .Values.image.tag | default .AppVersion -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "countersign.listenAddress" -}}
{{- if .Values.listen.unixSocket -}}
{{- printf "unix:%s/countersign.sock" .Values.listen.socketDir -}}
{{- else -}}
{{- printf "%s:%d" .Values.listen.host (int .Values.listen.port) -}}
{{- end -}}
{{- end -}}

{{/* The address the agent dials: loopback for a wildcard listen host. */}}
{{- define "countersign.agentAddress" -}}
{{- if .Values.listen.unixSocket -}}
{{- include "countersign.listenAddress" . -}}
{{- else if has .Values.listen.host (list "0.0.0.0" "::" "[::]") -}}
{{- printf "127.0.0.1:%d" (int .Values.listen.port) -}}
{{- else -}}
{{- include "countersign.listenAddress" . -}}
{{- end -}}
{{- end -}}

{{- define "countersign.redisEnv" -}}
{{- $r := .Values.redis -}}
- name: COUNTERSIGN_REDIS_MODE
  value: {{ $r.mode | quote }}
{{- if $r.existingSecret }}
- name: COUNTERSIGN_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ $r.existingSecret | quote }}
      key: {{ $r.existingSecretKey | quote }}
{{- else if $r.url }}
- name: COUNTERSIGN_REDIS_URL
  value: {{ $r.url | quote }}
{{- else if eq $r.mode "sentinel" }}
{{- if not $r.sentinel.addresses }}{{ fail "countersign: redis.mode sentinel needs redis.sentinel.addresses (or redis.url / redis.existingSecret)" }}{{ end }}
{{- if not $r.sentinel.masterName }}{{ fail "countersign: redis.mode sentinel needs redis.sentinel.masterName" }}{{ end }}
- name: COUNTERSIGN_REDIS_URL
  value: {{ printf "%s://%s/%s/%d" (ternary "rediss+sentinel" "redis+sentinel" $r.sentinel.tls) (join "," $r.sentinel.addresses) $r.sentinel.masterName (int $r.sentinel.db) | quote }}
{{- else }}
{{- fail (printf "countersign: redis.url (or redis.existingSecret) is required for redis.mode %s: the image has no embedded redis-server" $r.mode) }}
{{- end }}
{{- end -}}

{{- define "countersign.probe" -}}
{{- $ := index . 0 -}}
{{- $p := index . 1 -}}
{{- if eq $.Values.probes.type "grpc" -}}
grpc:
  port: {{ int $.Values.listen.port }}
  service: ""
{{- else -}}
exec:
  command: ["/usr/local/bin/countersign-healthcheck", "--timeout", {{ sub (int $p.timeoutSeconds) 1 | max 1 | toString | quote }}]
{{- end }}
periodSeconds: {{ $p.periodSeconds }}
timeoutSeconds: {{ $p.timeoutSeconds }}
failureThreshold: {{ $p.failureThreshold }}
{{- end -}}

{{/* ---- public templates ---- */}}

{{- define "countersign.sidecar" -}}
{{- $ := include "countersign.ctx" . | fromJson -}}
{{- $v := $.Values -}}
{{- if and (eq $v.probes.type "grpc") (or $v.listen.unixSocket (not (has $v.listen.host (list "0.0.0.0" "::" "[::]")))) -}}
{{- fail "countersign: probes.type grpc needs listen.host 0.0.0.0 (kubelet's gRPC probe dials the pod IP, not loopback or a socket); use probes.type exec" -}}
{{- end -}}
- name: countersign
  image: {{ include "countersign.image" $ | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  # A native sidecar: started before the agent, kept running, stopped after it.
  restartPolicy: Always
  {{- if $v.listen.unixSocket }}
  # umask 0007: the socket is group-writable, the pod's fsGroup lets the agent connect.
  command: ["/bin/sh", "-c", "umask 0007 && exec countersign serve"]
  {{- end }}
  env:
    - name: COUNTERSIGN_LISTEN
      value: {{ include "countersign.listenAddress" $ | quote }}
    - name: COUNTERSIGN_METRICS_LISTEN
      value: {{ ternary (printf "0.0.0.0:%d" (int $v.metrics.port)) "" $v.metrics.enabled | quote }}
    - name: COUNTERSIGN_REGISTRY
      value: /etc/countersign/registry/registry.yaml
    {{- if $v.keys.existingSecret }}
    - name: COUNTERSIGN_KEYS_FILE
      value: /etc/countersign/keys/keys.json
    {{- end }}
    {{- include "countersign.redisEnv" $ | nindent 4 }}
    - name: COUNTERSIGN_CONFIRM_TTL
      value: {{ $v.settings.confirmTTL | quote }}
    - name: COUNTERSIGN_REPLAY_TTL
      value: {{ $v.settings.replayTTL | quote }}
    - name: COUNTERSIGN_LEASE
      value: {{ $v.settings.lease | quote }}
    - name: COUNTERSIGN_DOWNSTREAM_DEADLINE
      value: {{ $v.settings.downstreamDeadline | quote }}
    - name: COUNTERSIGN_GRACE
      value: {{ $v.settings.grace | quote }}
    - name: COUNTERSIGN_LOG_LEVEL
      value: {{ $v.settings.logLevel | quote }}
    - name: COUNTERSIGN_MAX_IN_FLIGHT
      value: {{ $v.settings.maxInFlight | int | toString | quote }}
    - name: COUNTERSIGN_TENANT_QUOTA
      value: {{ $v.settings.tenantQuota | int | toString | quote }}
    {{- if $v.tracing.endpoint }}
    - name: OTEL_EXPORTER_OTLP_ENDPOINT
      value: {{ $v.tracing.endpoint | quote }}
    - name: OTEL_TRACES_SAMPLER
      value: parentbased_traceidratio
    - name: OTEL_TRACES_SAMPLER_ARG
      value: {{ $v.tracing.sampleRatio | toString | quote }}
    - name: OTEL_SERVICE_NAME
      value: countersign
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if or $v.metrics.enabled (not $v.listen.unixSocket) }}
  ports:
    {{- if $v.metrics.enabled }}
    - name: cs-metrics
      containerPort: {{ int $v.metrics.port }}
      protocol: TCP
    {{- end }}
    {{- if not $v.listen.unixSocket }}
    - name: cs-grpc
      containerPort: {{ int $v.listen.port }}
      protocol: TCP
    {{- end }}
  {{- end }}
  startupProbe:
    {{- include "countersign.probe" (list $ $v.probes.startup) | nindent 4 }}
  livenessProbe:
    {{- include "countersign.probe" (list $ $v.probes.liveness) | nindent 4 }}
  readinessProbe:
    {{- include "countersign.probe" (list $ $v.probes.readiness) | nindent 4 }}
  resources:
    {{- toYaml $v.resources | nindent 4 }}
  securityContext:
    {{- toYaml $v.securityContext | nindent 4 }}
  volumeMounts:
    - name: countersign-registry
      mountPath: /etc/countersign/registry
      readOnly: true
    {{- if $v.keys.existingSecret }}
    - name: countersign-keys
      mountPath: /etc/countersign/keys
      readOnly: true
    {{- end }}
    - name: countersign-tmp
      mountPath: /tmp
    {{- if $v.listen.unixSocket }}
    - name: countersign-socket
      mountPath: {{ $v.listen.socketDir }}
    {{- end }}
{{- end -}}

{{- define "countersign.volumes" -}}
{{- $ := include "countersign.ctx" . | fromJson -}}
{{- $v := $.Values -}}
- name: countersign-registry
  configMap:
    name: {{ include "countersign.fullname" $ }}-registry
{{- if $v.keys.existingSecret }}
- name: countersign-keys
  secret:
    secretName: {{ $v.keys.existingSecret | quote }}
    defaultMode: 0444
    items:
      - key: {{ $v.keys.secretKey | quote }}
        path: keys.json
{{- end }}
- name: countersign-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- if $v.listen.unixSocket }}
- name: countersign-socket
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- end -}}

{{- define "countersign.podAnnotations" -}}
{{- $ := include "countersign.ctx" . | fromJson -}}
checksum/countersign-registry: {{ include "countersign.registryText" $ | sha256sum }}
{{- end -}}

{{- define "countersign.podLabels" -}}
{{- $ := include "countersign.ctx" . | fromJson -}}
countersign.io/sidecar: {{ include "countersign.fullname" $ | quote }}
{{- end -}}

{{- define "countersign.agentEnv" -}}
{{- $ := include "countersign.ctx" . | fromJson -}}
- name: COUNTERSIGN_ADDR
  value: {{ include "countersign.agentAddress" $ | quote }}
{{- end -}}

{{- define "countersign.agentVolumeMounts" -}}
{{- $ := include "countersign.ctx" . | fromJson -}}
{{- if $.Values.listen.unixSocket -}}
- name: countersign-socket
  mountPath: {{ $.Values.listen.socketDir }}
{{- end -}}
{{- end -}}
