{{/* The name of every object: the release name, with the chart's unless it already says it. */}}
{{- define "backfill.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the pods: never change them after the first install. */}}
{{- define "backfill.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "backfill.labels" -}}
{{ include "backfill.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The Secret that holds DATABASE_URL, DIRECT_DATABASE_URL and API_TOKEN. */}}
{{- define "backfill.secretName" -}}
{{- .Values.database.existingSecret | default (include "backfill.fullname" .) -}}
{{- end -}}

{{/*
The pod's grace period covers the whole stop: the preStop sleep (the pod keeps serving
while endpoints and load balancers stop sending it requests), then SIGTERM's drain of
in-flight requests for at most SHUTDOWN_TIMEOUT, then stopping the sweep, webhook delivery
and the event listener. Past it the kubelet sends SIGKILL.
*/}}
{{- define "backfill.terminationGracePeriodSeconds" -}}
{{- add .Values.shutdown.preStopSleepSeconds .Values.shutdown.drainTimeoutSeconds .Values.shutdown.stopSeconds -}}
{{- end -}}
