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

{{/*
The API flavour (values.flavour) the release runs: kdra or native. "auto" (the default) is
native where the cluster serves resource.k8s.io/v1 (Kubernetes >= 1.34; helm template without
a cluster assumes it does), kdra where it does not - except on an upgrade, which keeps the
flavour the running operator has (its Deployment's KDRA_FLAVOUR): a cluster upgraded to 1.34
does not switch an installation's claims from kdra's CRDs to the built-in kinds under it (an
operator without KDRA_FLAVOUR predates the flavours: kdra; one with auto: what is served).
Operator and agent get the resolved flavour, never "auto", so that the agent's volumes (the
kubelet's plugin directories or the NRI socket) always match it. Anything else fails the
render.
*/}}
{{- define "kdra.flavour" -}}
{{- $flavour := .Values.flavour -}}
{{- if not (has $flavour (list "auto" "kdra" "native")) -}}
{{- fail (printf "flavour must be auto, kdra or native, not %q" $flavour) -}}
{{- end -}}
{{- if eq $flavour "auto" -}}
{{- $served := ternary "native" "kdra" (.Capabilities.APIVersions.Has "resource.k8s.io/v1") -}}
{{- $flavour = $served -}}
{{- $running := lookup "apps/v1" "Deployment" .Release.Namespace "kdra-operator" -}}
{{- if $running -}}
{{- /* An operator without KDRA_FLAVOUR predates the flavours: it ran kdra's CRDs. */ -}}
{{- $flavour = "kdra" -}}
{{- range (index $running.spec.template.spec.containers 0).env -}}
{{- if eq .name "KDRA_FLAVOUR" -}}
{{- $value := .value | default "" | lower -}}
{{- $flavour = ternary $value $served (has $value (list "kdra" "native")) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $flavour -}}
{{- end -}}

{{/* The agent's volume of a driver's DRA socket directory (flavour native): plugin-<driver
     with dots as dashes>, as components/native-agent names gpu.kdra.dev's. */}}
{{- define "kdra.pluginVolume" -}}
{{ printf "plugin-%s" (replace "." "-" (index . 1)) | trunc 63 | trimSuffix "-" }}
{{- end }}
