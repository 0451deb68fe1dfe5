{{/* The image of operator and agent. */}}
{{- define "kdra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Labels on every object's metadata (not on selectors or pod templates: they must stay
     what the kustomize manifests select, so that a release can replace a kustomize install). */}}
{{- define "kdra.labels" -}}
app.kubernetes.io/part-of: kdra
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The agent's volume of a driver's DRA socket directory (flavour native): plugin-<driver
     with dots as dashes>, as components/native-agent names gpu.kdra.dev's. */}}
{{- define "kdra.pluginVolume" -}}
{{ printf "plugin-%s" (replace "." "-" (index . 1)) | trunc 63 | trimSuffix "-" }}
{{- end }}
