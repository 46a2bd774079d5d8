{{/* ---------------------------------------------------------------------------------
The GRPO run: command, identity and the JSON files the launcher and preparation Jobs read.
--------------------------------------------------------------------------------- */}}

{{/* The value NeMo RL gets for one key of grpo.overrides + extraOverrides ("" when absent):
the last `key=`, `+key=` or `++key=` wins, as on its command line. */}}
{{- define "nemo-rl-gke.overrideOf" -}}
{{- $prefix := printf "%s=" .key -}}
{{- $value := "" -}}
{{- range concat .ctx.Values.grpo.overrides (.ctx.Values.grpo.extraOverrides | default list) -}}
{{- $arg := trimPrefix "+" (trimPrefix "+" .) -}}
{{- if hasPrefix $prefix $arg }}{{ $value = trimPrefix $prefix $arg }}{{ end -}}
{{- end -}}
{{- $value -}}
{{- end -}}

{{/* The Ray job entrypoint (a shell command). Every argument is single-quoted; the schema keeps
quotes, spaces and backslashes out of overrides. */}}
{{- define "nemo-rl-gke.grpoEntrypoint" -}}
cd {{ .Values.grpo.codeDir | default "/opt/nemo-rl" }} && uv run python {{ .Values.grpo.entrypoint }} --config {{ squote .Values.grpo.recipe }}
{{- range concat .Values.grpo.overrides (.Values.grpo.extraOverrides | default list) }} {{ squote . }}{{ end }}
{{- end -}}

{{/* Identity of the run: what defines it (command and image), hashed into the Ray submission id.
The same run always gives the same id, so a new launcher of an unchanged run submits nothing, and
a changed run is submitted anew. */}}
{{- define "nemo-rl-gke.runIdentity" -}}
{{- dict "entrypoint" (include "nemo-rl-gke.grpoEntrypoint" .) "image" (include "nemo-rl-gke.image" .) | toJson -}}
{{- end -}}

{{/* The data of the ConfigMap the launcher and preparation Jobs read: their programs and specs. */}}
{{- define "nemo-rl-gke.runConfigData" -}}
{{ (.Files.Glob "files/*.py").AsConfig }}
launch.json: |
  {{- include "nemo-rl-gke.launchSpec" . | fromJson | toPrettyJson | nindent 2 }}
prepare.json: |
  {{- include "nemo-rl-gke.prepareSpec" . | fromJson | toPrettyJson | nindent 2 }}
{{- end -}}

{{/* Named by a hash of its whole data: any change to what the Jobs read (a launcher timeout,
maxRestarts, the programs) renames it, and so the Jobs whose pods mount it; a launcher that
already ended runs again with the new settings. */}}
{{- define "nemo-rl-gke.runConfigMapName" -}}
{{- include "nemo-rl-gke.hashedName" (dict "ctx" . "kind" "run" "of" (include "nemo-rl-gke.runConfigData" .)) -}}
{{- end -}}

{{- define "nemo-rl-gke.submissionId" -}}
{{- include "nemo-rl-gke.hashedName" (dict "ctx" . "kind" "submission" "of" (include "nemo-rl-gke.runIdentity" .)) -}}
{{- end -}}

{{/* The Ray head's Service (at most 62 characters: the release name is at most 53). */}}
{{- define "nemo-rl-gke.headServiceName" -}}
{{- printf "%s-head-svc" (include "nemo-rl-gke.fullname" .) -}}
{{- end -}}

{{- define "nemo-rl-gke.workerNodes" -}}
{{- $n := 0 -}}
{{- range .Values.workerGroups }}{{ $n = add $n .replicas }}{{ end -}}
{{- $n -}}
{{- end -}}

{{/* What the preparation Job fetches; its hash names the Job and the marker file. */}}
{{- define "nemo-rl-gke.prepareSpec" -}}
{{- $model := "" -}}
{{- if .Values.prepare.downloadModel }}{{ $model = include "nemo-rl-gke.overrideOf" (dict "ctx" . "key" "policy.model_name") }}{{ end -}}
{{- $spec := dict "hf_home" .Values.storage.hfHome "model" $model "gsm8k_jsonl_dir" (.Values.prepare.gsm8kJsonlDir | default "") "image" (include "nemo-rl-gke.image" .) -}}
{{- $hash := include "nemo-rl-gke.hash" ($spec | toJson) -}}
{{- $_ := set $spec "marker" (printf "%s/nemo-rl/.prepared/%s.json" (trimSuffix "/" .Values.storage.mountPath) $hash) -}}
{{- $_ := set $spec "hash" $hash -}}
{{- /* Not in the hash: the cache does not depend on the run, the check does (by its submission id). */ -}}
{{- with include "nemo-rl-gke.configVerdict" . -}}
{{- $check := dict "submission_id" (include "nemo-rl-gke.submissionId" $) "entrypoint" (include "nemo-rl-gke.grpoEntrypoint" $) "verdict" . "overrides_given" (len $.Values.grpo.overrides) -}}
{{- $_ := set $spec "check" $check -}}
{{- end -}}
{{- toJson $spec -}}
{{- end -}}

{{/* The verdict of NeMo RL's own config code on this run, written by the preparation Job
(files/config_check.py) before the launcher submits; one file per run spec (its submission id:
the command and the image). "" when the preparation Job does not check the run. */}}
{{- define "nemo-rl-gke.configVerdict" -}}
{{- if and .Values.prepare.enabled .Values.prepare.checkRun -}}
{{- printf "%s/nemo-rl/.checked/%s.json" (trimSuffix "/" .Values.storage.mountPath) (include "nemo-rl-gke.submissionId" .) -}}
{{- end -}}
{{- end -}}

{{/* Where the launcher keeps the run's outcome: the folder "launcher" in the run's folder (the
checkpoint folder's parent), relative to storage.mountPath; "" when the checkpoint folder is not
set or not on the shared volume (`validate` reports that). The launcher mounts just this folder
read-write, at outcomeMountPath. */}}
{{- define "nemo-rl-gke.outcomeSubPath" -}}
{{- $ckpt := include "nemo-rl-gke.overrideOf" (dict "ctx" . "key" "checkpointing.checkpoint_dir") -}}
{{- $mount := trimSuffix "/" .Values.storage.mountPath -}}
{{- if and $ckpt (hasPrefix (printf "%s/" $mount) (printf "%s/" (dir $ckpt))) -}}
{{- trimPrefix "/" (printf "%s/launcher" (trimPrefix $mount (dir $ckpt))) -}}
{{- end -}}
{{- end -}}

{{- define "nemo-rl-gke.outcomeMountPath" -}}
/var/lib/nemo-rl-gke/outcome
{{- end -}}

{{- define "nemo-rl-gke.launchSpec" -}}
{{- $fullname := include "nemo-rl-gke.fullname" . -}}
{{- $nodes := include "nemo-rl-gke.workerNodes" . | int -}}
{{- $waitFor := list -}}
{{- if .Values.prepare.enabled }}{{ $waitFor = append $waitFor (include "nemo-rl-gke.prepareSpec" . | fromJson).marker }}{{ end -}}
{{/* launcher.* as they are: the schema requires each, so nothing is defaulted here; the keys are
those of the launcher's SPEC_KEYS (files/launcher.py). */}}
{{- $l := .Values.launcher -}}
{{- $spec := dict
    "address" (printf "http://%s.%s.svc.cluster.local:8265" (include "nemo-rl-gke.headServiceName" .) .Release.Namespace)
    "submission_id" (include "nemo-rl-gke.submissionId" .)
    "entrypoint" (include "nemo-rl-gke.grpoEntrypoint" .)
    "expected_gpus" (mul $nodes .Values.accelerator.gpusPerNode)
    "expected_nodes" (add $nodes 1)
    "ray_version" (toString .Values.rayVersion)
    "checkpoint_dir" (include "nemo-rl-gke.overrideOf" (dict "ctx" . "key" "checkpointing.checkpoint_dir"))
    "max_num_steps" (include "nemo-rl-gke.overrideOf" (dict "ctx" . "key" "grpo.max_num_steps") | atoi)
    "wait_for_files" $waitFor
    "follow" $l.follow
    "max_restarts" $l.maxRestarts
    "previous_runs" $l.previousRuns
    "timeouts" (dict "files_s" $l.timeouts.prepareSeconds "head_s" $l.timeouts.headSeconds "gpus_s" $l.timeouts.gpusSeconds)
    "metadata" (dict "nemo-rl-gke.release" $fullname "nemo-rl-gke.run" .Values.grpo.runName)
-}}
{{- with include "nemo-rl-gke.configVerdict" . -}}
{{- $_ := set $spec "config_verdict" . -}}
{{- end -}}
{{- with include "nemo-rl-gke.outcomeSubPath" . -}}
{{- $_ := set $spec "outcome_dir" (include "nemo-rl-gke.outcomeMountPath" $) -}}
{{- $_ := set $spec "outcome_volume_dir" (printf "%s/%s" (trimSuffix "/" $.Values.storage.mountPath) .) -}}
{{- end -}}
{{- if $l.releaseGpus -}}
{{- $groups := dict -}}
{{- range .Values.workerGroups }}{{ $_ := set $groups (toString .name) .replicas }}{{ end -}}
{{- $release := dict "raycluster" $fullname "namespace" .Release.Namespace "groups" $groups "kueue" .Values.kueue.enabled -}}
{{- $_ := set $release "service_account_dir" "/var/run/secrets/kubernetes.io/serviceaccount" -}}
{{- $_ := set $spec "gpu_release" $release -}}
{{- end -}}
{{- if eq .Values.network.mode "rdma" -}}
{{- $ifs := list -}}
{{- range include "nemo-rl-gke.interfaces" . | fromJsonArray }}{{ $ifs = append $ifs .interfaceName }}{{ end -}}
{{- $_ := set $spec "expected_interfaces" $ifs -}}
{{- end -}}
{{- toJson $spec -}}
{{- end -}}

{{/* Pod settings shared by the launcher, preparation and test pods: no privileges, CPU nodes,
and no Kubernetes API token, except the launcher's when it releases the GPU workers
(launcher.releaseGpus): pass "launcher" true. "runAsUser" N: 0 keeps the image's root (the
launcher and the preparation Job write folders of the shared volume that root pods create; see
launcher.runAsUser), any other id runs as that user and group, with that fsGroup. */}}
{{- define "nemo-rl-gke.jobPodSecurity" -}}
{{- $pod := include "nemo-rl-gke.podSeccomp" . | fromYaml -}}
{{- with .runAsUser -}}
{{- $_ := set $pod "runAsNonRoot" true -}}
{{- $_ := set $pod "runAsUser" . -}}
{{- $_ := set $pod "runAsGroup" . -}}
{{- $_ := set $pod "fsGroup" . -}}
{{- end -}}
{{- $identity := dict "ctx" .ctx "securityContext" $pod -}}
{{- if and .launcher .ctx.Values.launcher.releaseGpus -}}
{{- $_ := set $identity "serviceAccount" (include "nemo-rl-gke.launcherServiceAccountName" .ctx) -}}
{{- $_ := set $identity "token" true -}}
{{- end -}}
{{- include "nemo-rl-gke.podIdentity" $identity }}
{{- with .ctx.Values.launcher.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .ctx.Values.launcher.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The root filesystem is read-only: the programs write only their mounts (the shared volume,
the outcome folder) and /tmp, an emptyDir (nemo-rl-gke.jobScratch). */}}
{{- define "nemo-rl-gke.containerSecurity" -}}
securityContext:
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  capabilities:
    drop: ["ALL"]
{{- end -}}

{{/* /tmp and HOME for a read-only root filesystem: Python's tempfile, Ray's client library and
Hugging Face write there. Call with "mount" true for the volumeMount, false for the volume. */}}
{{- define "nemo-rl-gke.jobScratch" -}}
{{- if .mount -}}
- name: tmp
  mountPath: /tmp
{{- else -}}
- name: tmp
  emptyDir:
    sizeLimit: 1Gi
{{- end -}}
{{- end -}}

{{- define "nemo-rl-gke.jobScratchEnv" -}}
- name: HOME
  value: /tmp
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
{{- end -}}
