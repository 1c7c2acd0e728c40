{{/* Chart name, truncated to 63 characters (the limit of a label value). */}}
{{- define "ha-guard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's resources: the release name when it contains the chart name (a
release "ha-guard" gives "ha-guard"), else "<release>-<chart>". 63 characters at most; the
longest derived name, "<fullname>-selfsigned", stays a valid object name.
*/}}
{{- define "ha-guard.fullname" -}}
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

{{/* Chart name and version, for the helm.sh/chart label. */}}
{{- define "ha-guard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "ha-guard.labels" -}}
helm.sh/chart: {{ include "ha-guard.chart" . }}
{{ include "ha-guard.selectorLabels" . }}
app.kubernetes.io/version: {{ include "ha-guard.tag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the pods: fixed for the life of a release (a Deployment's selector is immutable). */}}
{{- define "ha-guard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ha-guard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The image tag: image.tag, else the chart's appVersion. */}}
{{- define "ha-guard.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The image reference: by digest when one is given. */}}
{{- define "ha-guard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "ha-guard.tag" .) }}
{{- end }}
{{- end }}

{{/* Name of the Secret holding the serving certificate. */}}
{{- define "ha-guard.tlsSecret" -}}
{{- if eq .Values.certificates.mode "secret" }}
{{- .Values.certificates.secret.name }}
{{- else }}
{{- printf "%s-tls" (include "ha-guard.fullname" .) }}
{{- end }}
{{- end }}

{{/* Whether the pods read their certificate from files (a mounted Secret) rather than the API. */}}
{{- define "ha-guard.filesMode" -}}
{{- if ne .Values.certificates.mode "managed" }}true{{ end }}
{{- end }}

{{/* Whether the cluster has admission webhook matchConditions (GA in 1.30). */}}
{{- define "ha-guard.matchConditions" -}}
{{- if semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version }}true{{ end }}
{{- end }}

{{/*
The namespaceSelector of both webhooks: kube-system, the release namespace (so ha-guard can always
be repaired, whatever failurePolicy says) and namespaces labelled ha-guard.io/mode: "off" are never
sent, then what the user adds.
*/}}
{{- define "ha-guard.namespaceSelector" -}}
{{- $excluded := concat (list "kube-system" .Release.Namespace) .Values.webhook.excludeNamespaces | uniq }}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: [{{ range $i, $n := $excluded }}{{ if $i }}, {{ end }}{{ $n | quote }}{{ end }}]
  - key: ha-guard.io/mode
    operator: NotIn
    values: ["off"]
  {{- with .Values.webhook.namespaceSelector.matchExpressions }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with .Values.webhook.namespaceSelector.matchLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The objectSelector of both webhooks, when the user sets one. */}}
{{- define "ha-guard.objectSelector" -}}
{{- with .Values.webhook.objectSelector.matchExpressions }}
matchExpressions:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.webhook.objectSelector.matchLabels }}
matchLabels:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* clientConfig of a webhook; the argument is (list $ "/path"). */}}
{{- define "ha-guard.clientConfig" -}}
{{- $ := index . 0 }}
service:
  name: {{ include "ha-guard.fullname" $ }}
  namespace: {{ $.Release.Namespace }}
  path: {{ index . 1 }}
  port: 443
{{- if eq $.Values.certificates.mode "secret" }}
caBundle: {{ $.Values.certificates.secret.caBundle | b64enc }}
{{- end }}
{{- end }}

{{/* Checks across values that the schema cannot express, with messages naming the fix. */}}
{{- define "ha-guard.validate" -}}
{{- $grace := int .Values.terminationGracePeriodSeconds }}
{{- $needed := add .Values.shutdown.delaySeconds .Values.shutdown.timeoutSeconds }}
{{- if lt $grace (int $needed) }}
{{- fail (printf "terminationGracePeriodSeconds (%d) must be at least shutdown.delaySeconds + shutdown.timeoutSeconds (%d), or the kubelet kills ha-guard while it still answers reviews" $grace (int $needed)) }}
{{- end }}
{{- if eq .Values.certificates.mode "secret" }}
{{- if not .Values.certificates.secret.name }}
{{- fail "certificates.mode=secret needs certificates.secret.name: a Secret in the release namespace with tls.crt and tls.key" }}
{{- end }}
{{- if not .Values.certificates.secret.caBundle }}
{{- fail "certificates.mode=secret needs certificates.secret.caBundle: the PEM of the CA that signed the certificate (--set-file certificates.secret.caBundle=ca.crt), or the apiserver cannot verify the webhook" }}
{{- end }}
{{- end }}
{{- if and .Values.webhook.matchConditions (not (include "ha-guard.matchConditions" .)) }}
{{- fail (printf "webhook.matchConditions need Kubernetes 1.30 or later; this cluster is %s" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}
