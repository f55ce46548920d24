{{- define "streamjoin.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "streamjoin.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "streamjoin.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streamjoin.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "streamjoin.labels" -}}
{{ include "streamjoin.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: stream-join
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "streamjoin.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "streamjoin.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "streamjoin.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- /* The driver's and the executors' pods run with the same hardening. */}}
{{- define "streamjoin.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "streamjoin.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}

{{- /* Volumes both pods mount: scratch space, the checkpoint's shared claim, TLS material. */}}
{{- define "streamjoin.sharedVolumes" -}}
- name: tmp  # Spark's scratch space, Python workers, RocksDB's native library (needs exec)
  emptyDir: {}
{{- if and .Values.checkpoint.existingClaim (not .Values.checkpoint.location) }}
- name: checkpoint
  persistentVolumeClaim:
    claimName: {{ .Values.checkpoint.existingClaim }}
{{- end }}
{{- if .Values.tls.secretName }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- end }}
{{- end }}

{{- define "streamjoin.sharedVolumeMounts" -}}
- name: tmp
  mountPath: /tmp
{{- if not .Values.checkpoint.location }}
- name: checkpoint
  mountPath: {{ .Values.checkpoint.mountPath }}
{{- end }}
{{- if .Values.tls.secretName }}
- name: tls
  mountPath: {{ .Values.tls.mountPath }}
  readOnly: true
{{- end }}
{{- end }}
