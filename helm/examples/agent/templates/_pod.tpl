{{/* The agent's own pod template; templates/deployment.yaml passes it through "countersign.pod". */}}
{{- define "my-agent.pod" -}}
metadata:
  labels:
    app.kubernetes.io/name: my-agent
    app.kubernetes.io/instance: {{ .Release.Name }}
spec:
  securityContext:
    runAsNonRoot: true
    seccompProfile:
      type: RuntimeDefault
  containers:
    - name: agent
      image: {{ .Values.image | quote }}
      securityContext:
        runAsUser: 10002
        readOnlyRootFilesystem: true
        allowPrivilegeEscalation: false
        capabilities:
          drop: [ALL]
{{- end -}}
