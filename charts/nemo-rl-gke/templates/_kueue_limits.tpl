{{/* Generated from generator/gke/kueue_versions.py by scripts/sync.sh: do not edit.
The worker groups a RayCluster may have under Kueue .Values.kueue.version (empty: the lowest limit). */}}
{{- define "nemo-rl-gke.kueueMaxWorkerGroups" -}}
{{- $v := .Values.kueue.version | default "" -}}
{{- if not $v -}}
7
{{- else if semverCompare ">=0.19.0-0" $v -}}
17
{{- else if semverCompare ">=0.18.0-0" $v -}}
9
{{- else -}}
7
{{- end -}}
{{- end -}}
