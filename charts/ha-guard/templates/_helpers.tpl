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

{{/*
The audit's name: "<fullname>-audit" (the Deployment, its ServiceAccount, PDB, metrics Service,
ClusterRole and Role). The full name is cut to 57 characters first, so the suffix always stays and
the name never collides with the webhook's.
*/}}
{{- define "ha-guard.auditName" -}}
{{- printf "%s-audit" (include "ha-guard.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/*
Labels that select the audit's pods. Another app.kubernetes.io/name than the webhook's, so that no
selector of the webhook (its Deployment's, which is immutable, its Service's, PDB's, spread's and
NetworkPolicy's, all name + instance) ever matches an audit pod: the Service never sends an
admission request to one, and no pod is covered by two PDBs.
*/}}
{{- define "ha-guard.audit.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ha-guard.audit.appName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: audit
{{- end }}

{{/* The audit pods' app.kubernetes.io/name: "<name>-audit". */}}
{{- define "ha-guard.audit.appName" -}}
{{- printf "%s-audit" (include "ha-guard.name" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{/* Labels of the audit's objects. */}}
{{- define "ha-guard.audit.labels" -}}
helm.sh/chart: {{ include "ha-guard.chart" . }}
{{ include "ha-guard.audit.selectorLabels" . }}
app.kubernetes.io/part-of: {{ include "ha-guard.name" . }}
app.kubernetes.io/version: {{ include "ha-guard.tag" . | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
A humantime duration of the kind values.schema.json admits (digits and a unit, ms/s/m/h/d,
repeated: 30s, 5m, 1h30m) in milliseconds.
*/}}
{{- define "ha-guard.durationMs" -}}
{{- $ms := 0 }}
{{- $units := dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000 "d" 86400000 }}
{{- range regexFindAll "[0-9]+(ms|s|m|h|d)" . -1 }}
{{- $n := regexFind "^[0-9]+" . }}
{{- $ms = add $ms (mul (atoi $n) (get $units (trimPrefix $n .))) }}
{{- end }}
{{- $ms }}
{{- end }}

{{/* Milliseconds as a Prometheus duration in the largest unit that divides them: 10m, 90s, 1h. */}}
{{- define "ha-guard.promDuration" -}}
{{- $ms := int64 . }}
{{- if eq (mod $ms 3600000) 0 }}{{ div $ms 3600000 }}h
{{- else if eq (mod $ms 60000) 0 }}{{ div $ms 60000 }}m
{{- else if eq (mod $ms 1000) 0 }}{{ div $ms 1000 }}s
{{- else }}{{ $ms }}ms
{{- end }}
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
The one list of namespaces ha-guard leaves alone, as JSON (fromJsonArray): config.exemptNamespaces,
then the entries of the deprecated webhook.excludeNamespaces, then the release namespace. Entries
are names or globs (`*`); the configuration gets them all, the webhooks' namespaceSelector the
names only ("ha-guard.selectorExcluded").
*/}}
{{- define "ha-guard.exemptNamespaces" -}}
{{- concat (.Values.config.exemptNamespaces | default list) (.Values.webhook.excludeNamespaces | default list) (list .Release.Namespace) | uniq | toJson }}
{{- end }}

{{/*
The namespaces left out of both webhooks' namespaceSelector, as JSON: kube-system and the release
namespace (so ha-guard can always be repaired, whatever failurePolicy says), then the exact names
of "ha-guard.exemptNamespaces". A glob cannot be written as a namespaceSelector (it matches labels
by equality and set membership only): namespaces matching one are sent, and ha-guard skips them.
*/}}
{{- define "ha-guard.selectorExcluded" -}}
{{- $names := list "kube-system" .Release.Namespace }}
{{- range include "ha-guard.exemptNamespaces" . | fromJsonArray }}
{{- if not (contains "*" .) }}
{{- $names = append $names . }}
{{- end }}
{{- end }}
{{- $names | uniq | toJson }}
{{- end }}

{{/*
The namespaceSelector of both webhooks: the namespaces of "ha-guard.selectorExcluded" and those
labelled ha-guard.io/mode: "off" are never sent, then what the user adds.
*/}}
{{- define "ha-guard.namespaceSelector" -}}
{{- $excluded := include "ha-guard.selectorExcluded" . | fromJsonArray }}
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
{{- if and .Values.audit.enabled (lt (int64 (include "ha-guard.durationMs" .Values.audit.interval)) 30000) }}
{{- fail (printf "audit.interval (%s) must be at least 30s (ha-guard reports --interval refuses less)" .Values.audit.interval) }}
{{- end }}
{{- $seen := dict }}
{{- range .Values.config.exceptions }}
{{- if hasKey $seen .name }}
{{- fail (printf "config.exceptions: two exceptions are named %q; a name must be unique (every finding an exception allows names it)" .name) }}
{{- end }}
{{- $_ := set $seen .name true }}
{{- end }}
{{- if and .Values.webhook.matchConditions (not (include "ha-guard.matchConditions" .)) }}
{{- fail (printf "webhook.matchConditions need Kubernetes 1.30 or later; this cluster is %s" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}

{{/*
serve's --admission-policies for admissionPolicies.enabled: true is on, false is off, and auto is
auto (serve asks discovery at each sync which kinds the cluster serves) where the cluster serves
ValidatingAdmissionPolicies or is 1.30 or later (`helm template` without a cluster knows only
its built-in API list, which has none of them), off on an older cluster.
*/}}
{{- define "ha-guard.admissionPolicies" -}}
{{- $enabled := .Values.admissionPolicies.enabled }}
{{- if eq (toString $enabled) "true" }}on
{{- else if eq (toString $enabled) "false" }}off
{{- else if or (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) }}auto
{{- else }}off
{{- end }}
{{- end }}

{{/*
The names of every admission policy and binding ha-guard may generate, as JSON: ha-guard-<id> and
ha-guard-<id>-warn for each rule with a CEL form, ha-guard-<id> for each mutation with one (`ha-guard
rules`, POLICY column). The webhook's ServiceAccount may write these names only; tests/it/chart.rs
holds the list to the registry's.
*/}}
{{- define "ha-guard.admissionPolicyNames" -}}
{{- $names := list }}
{{- range list "spread-selector-missing" "spread-selector-mismatch" "spread-selector-overlap" "host-network-colocation" "csi-controller-recreate" "recreate-multi-replica" "pdb-blocks-eviction" "pdb-selector-empty" "pdb-selects-nothing" "pdb-unhealthy-eviction-policy" "termination-grace-zero" "prestop-exceeds-grace" "toleration-wildcard" "hpa-replica-bounds" "exemption-unknown-rule" }}
{{- $names = append $names (printf "ha-guard-%s" .) }}
{{- $names = append $names (printf "ha-guard-%s-warn" .) }}
{{- end }}
{{- range list "inject-spread-selector" "inject-unhealthy-pod-eviction-policy" }}
{{- $names = append $names (printf "ha-guard-%s" .) }}
{{- end }}
{{- $names | toJson }}
{{- end }}
