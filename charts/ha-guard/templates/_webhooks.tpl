{{/*
Both webhook configurations. The argument is (dict "root" $ "hook" BOOL): the same objects are
rendered twice, once as release resources (webhooks.yaml) and once as pre-delete hooks
(webhooks-cleanup.yaml). The hook copies are what removes the webhooks first on uninstall: Helm
deletes an existing object of a hook's kind and name before creating the hook
("before-hook-creation"), then deletes the hook itself ("hook-succeeded"). Because the copies are
identical, applying `helm template` output with its hooks by mistake changes nothing.
*/}}
{{- define "ha-guard.webhookConfigurations" -}}
{{- $ := .root }}
{{- $hook := .hook }}
{{- $fullname := include "ha-guard.fullname" $ }}
{{- $objectSelector := include "ha-guard.objectSelector" $ | trim }}
{{- $matchConditions := include "ha-guard.matchConditions" $ }}
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "ha-guard.labels" $ | nindent 4 }}
  {{- with include "ha-guard.hookedAnnotations" (dict "root" $ "hook" $hook) | trim }}
  {{- . | nindent 2 }}
  {{- end }}
webhooks:
  - name: mutate.ha-guard.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: {{ $.Values.webhook.failurePolicy }}
    timeoutSeconds: {{ $.Values.webhook.timeoutSeconds }}
    matchPolicy: Equivalent
    # Another webhook may add a spread after ours: run again to fill its selector.
    reinvocationPolicy: IfNeeded
    {{- if $matchConditions }}
    # Only what a mutation that config.mutations turns on could add to (see
    # "ha-guard.needsAMutation"), and only when something ha-guard reads changed: the apiserver
    # evaluates these for every Deployment, StatefulSet and PDB write anyway, and a call it skips
    # costs it more than the evaluation.
    matchConditions:
      {{- include "ha-guard.needsAMutation" $ | nindent 6 }}
      {{- include "ha-guard.changesWhatHaGuardReads" $ | nindent 6 }}
      {{- with $.Values.webhook.matchConditions }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- end }}
    clientConfig:
      {{- include "ha-guard.clientConfig" (list $ "/mutate") | trim | nindent 6 }}
    namespaceSelector:
      {{- include "ha-guard.namespaceSelector" $ | trim | nindent 6 }}
    {{- with $objectSelector }}
    objectSelector:
      {{- . | nindent 6 }}
    {{- end }}
    rules:
      - apiGroups: ["apps"]
        apiVersions: ["v1"]
        resources: ["deployments", "statefulsets"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
      - apiGroups: ["policy"]
        apiVersions: ["v1"]
        resources: ["poddisruptionbudgets"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: {{ $fullname }}
  labels:
    {{- include "ha-guard.labels" $ | nindent 4 }}
  {{- with include "ha-guard.hookedAnnotations" (dict "root" $ "hook" $hook) | trim }}
  {{- . | nindent 2 }}
  {{- end }}
webhooks:
  - name: validate.ha-guard.io
    admissionReviewVersions: ["v1"]
    sideEffects: None
    failurePolicy: {{ $.Values.webhook.failurePolicy }}
    timeoutSeconds: {{ $.Values.webhook.timeoutSeconds }}
    matchPolicy: Equivalent
    {{- if $matchConditions }}
    matchConditions:
      {{- include "ha-guard.changesWhatHaGuardReads" $ | nindent 6 }}
      {{- with $.Values.webhook.matchConditions }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- end }}
    clientConfig:
      {{- include "ha-guard.clientConfig" (list $ "/validate") | trim | nindent 6 }}
    namespaceSelector:
      {{- include "ha-guard.namespaceSelector" $ | trim | nindent 6 }}
    {{- with $objectSelector }}
    objectSelector:
      {{- . | nindent 6 }}
    {{- end }}
    rules:
      - apiGroups: ["apps"]
        apiVersions: ["v1"]
        resources: ["deployments", "statefulsets", "deployments/scale", "statefulsets/scale"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
      - apiGroups: ["policy"]
        apiVersions: ["v1"]
        resources: ["poddisruptionbudgets"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
      - apiGroups: ["autoscaling"]
        apiVersions: ["v2"]
        resources: ["horizontalpodautoscalers"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
      # KEDA's autoscaler, judged as an HPA is (a rule on a resource the cluster does not serve
      # matches nothing).
      - apiGroups: ["keda.sh"]
        apiVersions: ["v1alpha1"]
        resources: ["scaledobjects"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
      # The backend of webhooks (webhook-fail-closed-unavailable). The webhook configurations
      # themselves cannot be listed here: the apiserver never calls admission webhooks for them
      # (so that a broken webhook can always be removed); the live view watches them instead.
      - apiGroups: [""]
        apiVersions: ["v1"]
        resources: ["services"]
        operations: ["CREATE", "UPDATE"]
        scope: Namespaced
      # Aggregated APIs (apiservice-unavailable): cluster-scoped, so the namespaceSelector does not
      # apply to them; their status (the aggregator's availability controller) is not sent.
      - apiGroups: ["apiregistration.k8s.io"]
        apiVersions: ["v1"]
        resources: ["apiservices"]
        operations: ["CREATE", "UPDATE"]
        scope: Cluster
{{- end }}

{{/*
The matchCondition of both webhooks that leaves out the writes no rule or mutation can read: an
UPDATE of a Deployment, StatefulSet, PDB or HPA (or of a workload's scale) whose spec, labels,
ha-guard.io/* annotations (exemptions) and kubectl's last-applied-configuration annotation
(hpa-replicas-conflict reads its spec.replicas) are all as before, such as the deployment
controller's revision annotation, a finalizer, an ownerReference or any other metadata-only write.
ha-guard answers such an UPDATE, if it is sent anyway (before 1.30, or a configuration without this
condition), as if it had not been: allowed, with no warning and no patch
(src/server/review/unchanged.rs, which names the same resources and fields). Other resources and
operations are always sent. Every field is tested with has() first: labels and annotations may be
absent, and an error here would make the apiserver apply failurePolicy.
*/}}
{{- define "ha-guard.changesWhatHaGuardReads" -}}
{{- $reads := "(k.startsWith('ha-guard.io/') || k == 'kubectl.kubernetes.io/last-applied-configuration')" -}}
- name: changes-what-ha-guard-reads
  expression: >-
    request.operation != 'UPDATE' ||
    !(request.resource.group + '/' + request.resource.resource in
    ['apps/deployments', 'apps/statefulsets', 'policy/poddisruptionbudgets', 'autoscaling/horizontalpodautoscalers']) ||
    has(object.spec) != has(oldObject.spec) ||
    (has(object.spec) && object.spec != oldObject.spec) ||
    has(object.metadata.labels) != has(oldObject.metadata.labels) ||
    (has(object.metadata.labels) && object.metadata.labels != oldObject.metadata.labels) ||
    (has(object.metadata.annotations) && object.metadata.annotations.exists(k, {{ $reads }} &&
    !(has(oldObject.metadata.annotations) && k in oldObject.metadata.annotations &&
    oldObject.metadata.annotations[k] == object.metadata.annotations[k]))) ||
    (has(oldObject.metadata.annotations) && oldObject.metadata.annotations.exists(k, {{ $reads }} &&
    !(has(object.metadata.annotations) && k in object.metadata.annotations)))
{{- end }}

{{/*
The mutating webhook's first condition: the write could get a patch from a mutation
config.mutations turns on (defaults as `ha-guard rules` lists them; tests/it/chart.rs holds this
table to the registry). inject-unhealthy-pod-eviction-policy: a PDB with a spec and no
unhealthyPodEvictionPolicy. inject-spread-selector: a workload with a topologySpreadConstraint
that has no labelSelector. inject-default-spread and inject-match-label-keys depend on more than
one object can tell (HPA floors, every spread), so with either on every workload write is sent.
The chart knows only config.mutations: turning a mutation on by editing the ConfigMap by hand
needs this condition re-rendered too (helm upgrade with the value set).
*/}}
{{- define "ha-guard.needsAMutation" -}}
{{- $on := dict "inject-spread-selector" true "inject-unhealthy-pod-eviction-policy" true "inject-default-spread" false "inject-match-label-keys" false }}
{{- range $id, $value := .Values.config.mutations }}{{ $_ := set $on $id $value }}{{ end }}
{{- $pdb := ternary "has(object.spec) && !has(object.spec.unhealthyPodEvictionPolicy)" "false" (index $on "inject-unhealthy-pod-eviction-policy") }}
{{- $workload := "false" }}
{{- if or (index $on "inject-default-spread") (index $on "inject-match-label-keys") }}
{{- $workload = "true" }}
{{- else if index $on "inject-spread-selector" }}
{{- $workload = "has(object.spec) && has(object.spec.template) && has(object.spec.template.spec) && has(object.spec.template.spec.topologySpreadConstraints) && object.spec.template.spec.topologySpreadConstraints.exists(c, !has(c.labelSelector))" }}
{{- end -}}
- name: needs-a-mutation
  expression: >-
    request.resource.resource == 'poddisruptionbudgets' ? ({{ $pdb }}) : ({{ $workload }})
{{- end }}

{{/* The metadata.annotations of a webhook configuration, with the hook's when it is one. */}}
{{- define "ha-guard.hookedAnnotations" -}}
{{- $ := .root }}
{{- $a := deepCopy $.Values.webhook.annotations }}
{{- if eq $.Values.certificates.mode "certManager" }}
{{- $_ := set $a "cert-manager.io/inject-ca-from" (printf "%s/%s" $.Release.Namespace (include "ha-guard.fullname" $)) }}
{{- end }}
{{- if .hook }}
{{- $_ := set $a "helm.sh/hook" "pre-delete" }}
{{- $_ := set $a "helm.sh/hook-delete-policy" "before-hook-creation,hook-succeeded,hook-failed" }}
{{- end }}
{{- with $a }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
