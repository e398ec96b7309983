{{- define "turnpike.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "turnpike.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "turnpike.selectorLabels" -}}
app.kubernetes.io/name: {{ include "turnpike.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "turnpike.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "turnpike.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "turnpike.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "turnpike.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
turnpike.discovery: the namespaces the kubernetes-discovery pools read, as
JSON {"<namespace>": {"inferencePools": bool}}, each namespace as the
gateway resolves it (the InferencePool's, else the pool's, else the
release's).
*/}}
{{- define "turnpike.discovery" -}}
{{- $out := dict }}
{{- range .Values.pools }}
{{- $d := .discovery | default dict }}
{{- if eq ($d.kind | default "static") "kubernetes" }}
{{- $ns := $d.namespace | default $.Release.Namespace }}
{{- $ip := false }}
{{- if $d.inferencePool }}
{{- $ns = $d.inferencePool.namespace | default $ns }}
{{- $ip = true }}
{{- end }}
{{- $prev := get $out $ns | default dict }}
{{- $_ := set $out $ns (dict "inferencePools" (or $ip ($prev.inferencePools | default false))) }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* turnpike.rules: the RBAC rules of one namespace's entry. */}}
{{- define "turnpike.rules" -}}
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
{{- if .inferencePools }}
- apiGroups: ["inference.networking.k8s.io"]
  resources: ["inferencepools"]
  verbs: ["get", "list", "watch"]
{{- end }}
{{- end }}

{{/* turnpike.config: the config file, apiVersion first. */}}
{{- define "turnpike.config" -}}
{{- range $k := list "addr" "dataDir" "state" "pools" "apiVersion" }}
{{- if hasKey $.Values.config $k }}
{{- fail (printf "config.%s: the chart sets %s (see values.yaml: port, dataVolume, state, pools)" $k $k) }}
{{- end }}
{{- end }}
{{- if not .Values.pools }}
{{- fail "pools: at least one pool is required" }}
{{- end }}
{{- $cfg := deepCopy .Values.config }}
{{- $_ := set $cfg "addr" (printf ":%d" (int .Values.port)) }}
{{- $_ = set $cfg "dataDir" "/var/lib/turnpike" }}
{{- $_ = set $cfg "pools" .Values.pools -}}
apiVersion: turnpike/v1
{{ toYaml $cfg }}
{{- end }}
