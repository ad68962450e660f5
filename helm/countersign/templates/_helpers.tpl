{{/*
Countersign's named templates. One is public: it patches an agent's pod template.

  template:
    {{- include "countersign.pod" (dict "values" .Values.countersign "root" $ "pod" (include "my-agent.pod" . | fromYaml)) | nindent 4 }}

  values      the countersign chart's values as the parent sees them: .Values.countersign, or .Values.<alias>
              when the dependency is aliased. Passed explicitly, so neither an alias nor a parent's own keys
              (a top-level listen:, image:, ...) can be mistaken for them.
  root        the parent's root context ($): release name and namespace, and the subcharts, among which the
              one holding these values is found (for its name and appVersion: object names, image tag).
  pod         the agent's pod template, metadata and spec, as a dict.
  containers  optional list of container names that talk to the sidecar; default: every container.

It returns the pod template with: the sidecar as a native sidecar (an init container with restartPolicy
Always, after the pod's own init containers), its volumes (plus extraVolumes), COUNTERSIGN_ADDRESS (and the
socket mount) in the agent's containers, the registry checksum annotation (a registry change rolls the
pods), the label the metrics Service and PodMonitor select, and fsGroup 10001 for the unix socket unless the
pod sets one. The subchart itself renders the registry ConfigMap and, when enabled, the monitors.
*/}}

{{/*
The context every other template reads: .Values, .Chart (name, appVersion of the countersign chart whose
values these are), .Release. Takes (dict "values" V "root" R); R is this chart's root or a parent's.
*/}}
{{- define "countersign.ctx" -}}
{{- $values := .values -}}
{{- if not (kindIs "map" $values) -}}
{{- fail "countersign.pod: pass the countersign chart's values: (dict \"values\" .Values.countersign \"root\" $ \"pod\" ...), or .Values.<alias> when the dependency is aliased" -}}
{{- end -}}
{{- $wanted := omit $values "global" -}}
{{- $chart := dict -}}
{{- /* this chart itself (standalone, or its own templates), else the dependency holding these values */ -}}
{{- if and (eq (index .root.Chart.Annotations "countersign.io/chart") "true") (deepEqual (omit .root.Values "global") $wanted) -}}
{{- $chart = .root.Chart -}}
{{- else -}}
{{- range $name, $sub := (.root.Subcharts | default dict) -}}
{{- if and (not $chart) (eq (index $sub.Chart.Annotations "countersign.io/chart") "true") (deepEqual (omit $sub.Values "global") $wanted) -}}
{{- $chart = $sub.Chart -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not $chart -}}
{{- fail "countersign.pod: the values passed are not the values of any countersign dependency of this chart; pass .Values.<dependency name or alias> unchanged" -}}
{{- end -}}
{{- toJson (dict "Values" $values "Chart" (dict "Name" $chart.Name "AppVersion" $chart.AppVersion) "Release" (dict "Name" .root.Release.Name "Namespace" .root.Release.Namespace "Service" .root.Release.Service)) -}}
{{- end -}}

{{/* <release>-countersign (or <release>-<alias>): the base name of every object of this chart. */}}
{{- define "countersign.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
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

{{/* The label the metrics Service and the PodMonitor select. */}}
{{- define "countersign.podLabels" -}}
countersign.io/sidecar: {{ include "countersign.fullname" . | quote }}
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
{{- $tag := .Values.image.tag | default .Chart.AppVersion -}}
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
{{- /* A redis+cluster:// or redis(s)+sentinel:// URL says its mode; only a contradicting mode is an error. */ -}}
{{- $scheme := regexFind "^[a-z+]+://" ($r.url | default "") -}}
{{- $mode := $r.mode -}}
{{- if hasSuffix "+cluster://" $scheme -}}
{{- if eq $r.mode "sentinel" }}{{ fail (printf "countersign: redis.url %s... is a cluster URL but redis.mode is sentinel" $scheme) }}{{ end -}}
{{- $mode = "cluster" -}}
{{- else if hasSuffix "+sentinel://" $scheme -}}
{{- if eq $r.mode "cluster" }}{{ fail (printf "countersign: redis.url %s... is a sentinel URL but redis.mode is cluster" $scheme) }}{{ end -}}
{{- $mode = "sentinel" -}}
{{- end -}}
- name: COUNTERSIGN_REDIS_MODE
  value: {{ $mode | quote }}
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

{{/* One probe: (list ctx probeValues path). http: the metrics port's /healthz or /readyz. */}}
{{- define "countersign.probe" -}}
{{- $ := index . 0 -}}
{{- $p := index . 1 -}}
{{- $path := index . 2 -}}
{{- if eq $.Values.probes.type "http" -}}
httpGet:
  path: {{ $path }}
  port: cs-metrics
{{- else if eq $.Values.probes.type "grpc" -}}
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

{{/* The sidecar container (for initContainers: a native sidecar). Takes the ctx. */}}
{{- define "countersign.container" -}}
{{- $ := . -}}
{{- $v := .Values -}}
{{- if and (eq $v.probes.type "grpc") (or $v.listen.unixSocket (not (has $v.listen.host (list "0.0.0.0" "::" "[::]")))) -}}
{{- fail "countersign: probes.type grpc needs listen.host 0.0.0.0 (kubelet's gRPC probe dials the pod IP, not loopback or a socket); use probes.type http" -}}
{{- end -}}
{{- $wildcard := and (not $v.listen.unixSocket) (has $v.listen.host (list "0.0.0.0" "::" "[::]")) -}}
{{- if and $wildcard (not $v.tls.existingSecret) (not $v.listen.insecure) -}}
{{- fail "countersign: listen.host 0.0.0.0 without tls is plaintext gRPC on the pod network: set tls.existingSecret, or acknowledge it with listen.insecure: true (and a NetworkPolicy)" -}}
{{- end -}}
{{- if and $v.tls.existingSecret (ne $v.probes.type "http") -}}
{{- fail "countersign: with tls, use probes.type http (kubelet's gRPC probe and the exec healthcheck speak plaintext gRPC)" -}}
{{- end -}}
{{- if and $v.tls.allowedPeers (not $v.tls.clientAuth) -}}
{{- fail "countersign: tls.allowedPeers needs tls.clientAuth: only a verified client certificate names a peer" -}}
{{- end -}}
{{- if and (ne $v.approvals.verifiedContext "off") (not $v.approvals.existingConfigMap) -}}
{{- fail "countersign: approvals.verifiedContext needs approvals.existingConfigMap: its issuers sign the context assertions" -}}
{{- end -}}
{{- if and (eq $v.probes.type "http") (not $v.metrics.enabled) -}}
{{- fail "countersign: probes.type http is served on the metrics port: it needs metrics.enabled (or use probes.type exec)" -}}
{{- end -}}
name: countersign
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
  {{- include "countersign.redisEnv" $ | nindent 2 }}
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
  {{- if $v.listen.insecure }}
  - name: COUNTERSIGN_INSECURE_LISTEN
    value: "yes"
  {{- end }}
  {{- with $v.tls.existingSecret }}
  - name: COUNTERSIGN_TLS_CERT
    value: {{ printf "%s/tls.crt" $v.tls.mountPath | quote }}
  - name: COUNTERSIGN_TLS_KEY
    value: {{ printf "%s/tls.key" $v.tls.mountPath | quote }}
  {{- if $v.tls.clientAuth }}
  - name: COUNTERSIGN_TLS_CLIENT_CA
    value: {{ printf "%s/ca.crt" $v.tls.mountPath | quote }}
  {{- end }}
  {{- if $v.tls.allowedPeers }}
  - name: COUNTERSIGN_TLS_ALLOWED_PEERS
    value: {{ join "," $v.tls.allowedPeers | quote }}
  {{- end }}
  {{- end }}
  {{- with $v.approvals.existingConfigMap }}
  - name: COUNTERSIGN_APPROVALS
    value: {{ printf "%s/%s" $v.approvals.mountPath $v.approvals.settingsKey | quote }}
  {{- end }}
  {{- if ne $v.approvals.verifiedContext "off" }}
  - name: COUNTERSIGN_VERIFIED_CONTEXT
    value: {{ $v.approvals.verifiedContext | quote }}
  {{- end }}
  {{- with $v.downstreamTls.existingSecret }}
  - name: COUNTERSIGN_DOWNSTREAM_CA
    value: {{ printf "%s/ca.crt" $v.downstreamTls.mountPath | quote }}
  {{- if $v.downstreamTls.clientCertificate }}
  - name: COUNTERSIGN_DOWNSTREAM_CERT
    value: {{ printf "%s/tls.crt" $v.downstreamTls.mountPath | quote }}
  - name: COUNTERSIGN_DOWNSTREAM_KEY
    value: {{ printf "%s/tls.key" $v.downstreamTls.mountPath | quote }}
  {{- end }}
  {{- end }}
  {{- if $v.tracing.endpoint }}
  - name: OTEL_EXPORTER_OTLP_ENDPOINT
    value: {{ $v.tracing.endpoint | quote }}
  - name: OTEL_TRACES_SAMPLER
    value: parentbased_traceidratio
  - name: OTEL_TRACES_SAMPLER_ARG
    value: {{ $v.tracing.sampleRatio | toString | quote }}
  {{- end }}
  # OpenTelemetry resource: the service is named per agent release; pod, namespace and node from the
  # downward API (used when spans are exported: tracing.endpoint, or OTEL_TRACES_EXPORTER in extraEnv).
  - name: OTEL_SERVICE_NAME
    value: {{ $v.tracing.serviceName | default (include "countersign.fullname" $) | quote }}
  - name: K8S_POD_NAME
    valueFrom: {fieldRef: {fieldPath: metadata.name}}
  - name: K8S_NAMESPACE_NAME
    valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
  - name: K8S_NODE_NAME
    valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
  - name: OTEL_RESOURCE_ATTRIBUTES
    value: "k8s.pod.name=$(K8S_POD_NAME),k8s.namespace.name=$(K8S_NAMESPACE_NAME),k8s.node.name=$(K8S_NODE_NAME),k8s.container.name=countersign"
  {{- with $v.extraEnv }}
  {{- toYaml . | nindent 2 }}
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
  {{- include "countersign.probe" (list $ $v.probes.startup "/healthz") | nindent 2 }}
livenessProbe:
  {{- include "countersign.probe" (list $ $v.probes.liveness "/healthz") | nindent 2 }}
readinessProbe:
  {{- include "countersign.probe" (list $ $v.probes.readiness $v.probes.readinessPath) | nindent 2 }}
resources:
  {{- toYaml $v.resources | nindent 2 }}
securityContext:
  {{- toYaml $v.securityContext | nindent 2 }}
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
  {{- if $v.tls.existingSecret }}
  - name: countersign-tls
    mountPath: {{ $v.tls.mountPath }}
    readOnly: true
  {{- end }}
  {{- if $v.approvals.existingConfigMap }}
  - name: countersign-approvals
    mountPath: {{ $v.approvals.mountPath }}
    readOnly: true
  {{- end }}
  {{- if $v.downstreamTls.existingSecret }}
  - name: countersign-downstream-tls
    mountPath: {{ $v.downstreamTls.mountPath }}
    readOnly: true
  {{- end }}
  {{- if $v.listen.unixSocket }}
  - name: countersign-socket
    mountPath: {{ $v.listen.socketDir }}
  {{- end }}
  {{- with $v.extraVolumeMounts }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{/* The volumes the sidecar needs (a YAML list). Takes the ctx. */}}
{{- define "countersign.volumes" -}}
{{- $v := .Values -}}
- name: countersign-registry
  configMap:
    name: {{ include "countersign.fullname" . }}-registry
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
{{- if $v.tls.existingSecret }}
- name: countersign-tls
  secret:
    secretName: {{ $v.tls.existingSecret | quote }}
    defaultMode: 0444
{{- end }}
{{- if $v.approvals.existingConfigMap }}
- name: countersign-approvals
  configMap:
    name: {{ $v.approvals.existingConfigMap | quote }}
{{- end }}
{{- if $v.downstreamTls.existingSecret }}
- name: countersign-downstream-tls
  secret:
    secretName: {{ $v.downstreamTls.existingSecret | quote }}
    defaultMode: 0444
{{- end }}
{{- if $v.listen.unixSocket }}
- name: countersign-socket
  emptyDir:
    medium: Memory
    sizeLimit: 1Mi
{{- end }}
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* ---- the public template ---- */}}

{{- define "countersign.pod" -}}
{{- $ := include "countersign.ctx" . | fromJson -}}
{{- $v := $.Values -}}
{{- $pod := deepCopy (.pod | default dict) -}}
{{- $meta := $pod.metadata | default dict -}}
{{- $_ := set $meta "labels" (merge (include "countersign.podLabels" $ | fromYaml) ($meta.labels | default dict)) -}}
{{- $checksum := dict "checksum/countersign-registry" (include "countersign.registryText" $ | sha256sum) -}}
{{- $_ = set $meta "annotations" (merge $checksum ($meta.annotations | default dict)) -}}
{{- $_ = set $pod "metadata" $meta -}}
{{- $spec := $pod.spec | default dict -}}
{{- $_ = set $spec "initContainers" (append ($spec.initContainers | default list) (include "countersign.container" $ | fromYaml)) -}}
{{- $_ = set $spec "volumes" (concat ($spec.volumes | default list) (include "countersign.volumes" $ | fromYamlArray)) -}}
{{- $names := .containers | default list -}}
{{- $address := include "countersign.agentAddress" $ -}}
{{- $containers := list -}}
{{- range $c := $spec.containers | default list -}}
{{- if or (not $names) (has $c.name $names) -}}
{{- $env := $c.env | default list -}}
{{- $has := false -}}
{{- range $e := $env -}}{{- if eq $e.name "COUNTERSIGN_ADDRESS" -}}{{- $has = true -}}{{- end -}}{{- end -}}
{{- if not $has -}}
{{- $_ = set $c "env" (append $env (dict "name" "COUNTERSIGN_ADDRESS" "value" $address)) -}}
{{- end -}}
{{- if $v.listen.unixSocket -}}
{{- $_ = set $c "volumeMounts" (append ($c.volumeMounts | default list) (dict "name" "countersign-socket" "mountPath" $v.listen.socketDir)) -}}
{{- end -}}
{{- end -}}
{{- $containers = append $containers $c -}}
{{- end -}}
{{- $_ = set $spec "containers" $containers -}}
{{- if $v.listen.unixSocket -}}
{{- $security := $spec.securityContext | default dict -}}
{{- if not (hasKey $security "fsGroup") -}}
{{- $_ = set $security "fsGroup" 10001 -}}
{{- end -}}
{{- $_ = set $spec "securityContext" $security -}}
{{- end -}}
{{- $_ = set $pod "spec" $spec -}}
{{- toYaml $pod -}}
{{- end -}}
