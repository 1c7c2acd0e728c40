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
    # The only PDB mutation sets unhealthyPodEvictionPolicy where it is missing (and there is a
    # spec): a PDB that has it is not sent at all, which spares most PDB updates a round trip.
    # Workloads are sent (what they get depends on ha-guard's config) unless nothing ha-guard
    # reads changed (the second condition).
    matchConditions:
      - name: workload-or-pdb-without-eviction-policy
        expression: >-
          request.resource.resource != 'poddisruptionbudgets' ||
          (has(object.spec) && !has(object.spec.unhealthyPodEvictionPolicy))
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
