{{/* ---------------------------------------------------------------------------------
Checks that stop the render with a message of their own (the schema has checked types and
formats before any template runs). Included once, by raycluster.yaml, which every release renders.
--------------------------------------------------------------------------------- */}}

{{- define "nemo-rl-gke.validate" -}}
{{- $name := include "nemo-rl-gke.fullname" . -}}
{{/* KubeRay rejects RayCluster names longer than 53 characters or that are not DNS-1035 labels. */}}
{{- if gt (len $name) 53 -}}
{{- fail (printf "RayCluster name %q is %d characters; KubeRay allows at most 53. Use a shorter release name or set fullnameOverride." $name (len $name)) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $name) -}}
{{- fail (printf "RayCluster name %q is not a DNS-1035 label (lowercase letters, digits and '-', starting with a letter). Use another release name or set fullnameOverride." $name) -}}
{{- end -}}
{{- $names := dict -}}
{{- range .Values.workerGroups -}}
{{- if hasKey $names .name -}}
{{- fail (printf "workerGroups: the name %q is used twice; group names must be unique" .name) -}}
{{- end -}}
{{- $_ := set $names .name true -}}
{{- end -}}
{{- $maxGroups := include "nemo-rl-gke.kueueMaxWorkerGroups" . | atoi -}}
{{- if and .Values.kueue.enabled (gt (len .Values.workerGroups) $maxGroups) -}}
{{- fail (printf "kueue: under Kueue %s a RayCluster holds the head + at most %d worker groups; %d given: merge groups, or set kueue.version to the cluster's newer Kueue" (.Values.kueue.version | default "(kueue.version not set)") $maxGroups (len .Values.workerGroups)) -}}
{{- end -}}
{{- if eq .Values.secrets.source "files" -}}
{{- $files := .Values.secrets.fromFiles | default dict -}}
{{- if and .Values.secrets.hfTokenKey (not $files.hfToken) -}}
{{- fail "secrets.source is files: pass the Hugging Face token with --set-file secrets.fromFiles.hfToken=FILE" -}}
{{- end -}}
{{- if and .Values.secrets.wandbApiKeyKey (not $files.wandbApiKey) -}}
{{- fail "secrets.source is files: pass the W&B key with --set-file secrets.fromFiles.wandbApiKey=FILE" -}}
{{- end -}}
{{- end -}}
{{- end -}}
