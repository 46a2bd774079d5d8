{{/* ---------------------------------------------------------------------------------
Names. Everything derives from the release (or fullnameOverride), never a fixed string.
--------------------------------------------------------------------------------- */}}

{{- define "nemo-rl-gke.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The RayCluster name and the prefix of every object (checked in _validate.tpl: at most 53
characters, a DNS-1035 label). */}}
{{- define "nemo-rl-gke.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride -}}
{{- end -}}

{{/* The hash that names carry: 10 hex digits of the SHA-256 of a text. */}}
{{- define "nemo-rl-gke.hash" -}}
{{- . | sha256sum | trunc 10 -}}
{{- end -}}

{{/* <fullname, cut>-<kind>-<hash of .of> (no hash without .of); the one table of how much of the
fullname (at most 53 characters) each kind keeps. With it the Jobs and the run's ConfigMap are at
most 59 characters, the Ray submission id 51 (the launcher appends -retryN) and the test pod 55.
A changed cut renames the objects of existing releases, and a changed submission id submits their
run anew. Call with (dict "ctx" $ "kind" K "of" TEXT). */}}
{{- define "nemo-rl-gke.hashedName" -}}
{{- $cut := get (dict "run" 44 "prepare" 40 "submission" 40 "test" 50) .kind | int -}}
{{- $word := get (dict "run" "-run" "prepare" "-prepare" "submission" "" "test" "-test") .kind -}}
{{- include "nemo-rl-gke.fullname" .ctx | trunc $cut | trimSuffix "-" }}{{ $word }}{{ with .of }}-{{ include "nemo-rl-gke.hash" . }}{{ end -}}
{{- end -}}

{{- define "nemo-rl-gke.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels: stable across upgrades (used by pod templates of immutable objects).
Without a component: every pod of the release (the NetworkPolicy's and the PDB's selectors). */}}
{{- define "nemo-rl-gke.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nemo-rl-gke.name" .ctx | quote }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* Labels that change only when the user changes them: for the pod templates of Jobs, whose
names carry a hash of the template (a chart bump must not replace a running launcher). */}}
{{- define "nemo-rl-gke.stableLabels" -}}
{{ include "nemo-rl-gke.selectorLabels" . }}
app.kubernetes.io/part-of: {{ include "nemo-rl-gke.name" .ctx | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* All labels of an object. Call with (dict "ctx" $ "component" "ray-head"). The version is
that of NeMo RL the release runs (its image tag), not the chart's default. */}}
{{- define "nemo-rl-gke.labels" -}}
{{ include "nemo-rl-gke.stableLabels" . }}
app.kubernetes.io/version: {{ regexReplaceAll "[-._]+$" (.ctx.Values.image.tag | trunc 63) "" | quote }}
helm.sh/chart: {{ include "nemo-rl-gke.chart" .ctx }}
{{- end -}}

{{- define "nemo-rl-gke.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nemo-rl-gke.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The launcher's own ServiceAccount: the one identity with a Kubernetes API token, bound to a
Role that may get and patch this release's RayCluster (launcher.releaseGpus). */}}
{{- define "nemo-rl-gke.launcherServiceAccountName" -}}
{{- printf "%s-launcher" (include "nemo-rl-gke.fullname" .) -}}
{{- end -}}

{{/* Who a pod runs as: the release's ServiceAccount without a Kubernetes API token (only the
launcher calls the API: pass "serviceAccount" and "token" true for it), the pod's security
context when given, and the image pull Secrets.
Call with (dict "ctx" $ "securityContext" MAP-or-nothing). */}}
{{- define "nemo-rl-gke.podIdentity" -}}
serviceAccountName: {{ .serviceAccount | default (include "nemo-rl-gke.serviceAccountName" .ctx) | quote }}
automountServiceAccountToken: {{ .token | default false }}
{{- with .securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .ctx.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "nemo-rl-gke.claimName" -}}
{{- default (printf "%s-data" (include "nemo-rl-gke.fullname" .)) .Values.storage.existingClaim -}}
{{- end -}}

{{/* PersistentVolumes are cluster-scoped: include the namespace so two releases of the same
name in different namespaces do not collide. */}}
{{- define "nemo-rl-gke.volumeName" -}}
{{- printf "%s-%s-lustre" .Release.Namespace (include "nemo-rl-gke.fullname" .) | trunc 253 -}}
{{- end -}}

{{/* repository:tag, or repository:tag@digest with image.digest (the kubelet then pulls by digest). */}}
{{- define "nemo-rl-gke.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- with .Values.image.digest }}@{{ . }}{{ end -}}
{{- end -}}

{{/* The pod-level security context of every pod the chart renders (the Jobs and the test pod add
their user): the container runtime's default seccomp profile. GKE Standard runs pods without it
unconfined (Autopilot applies it itself); Kubernetes' baseline Pod Security level allows
RuntimeDefault and Localhost only. */}}
{{- define "nemo-rl-gke.podSeccomp" -}}
{{- dict "seccompProfile" (dict "type" "RuntimeDefault") | toYaml -}}
{{- end -}}

{{/* The securityContext of a Ray container from head/worker.securityContext. With privileged: true
only that is rendered: the API server refuses allowPrivilegeEscalation: false beside it, and a
privileged container has every capability anyway. */}}
{{- define "nemo-rl-gke.rayContainerSecurity" -}}
{{- $sc := . | default dict -}}
{{- if $sc.privileged -}}
privileged: true
{{- else -}}
{{- $out := dict -}}
{{- if hasKey $sc "allowPrivilegeEscalation" }}{{ $_ := set $out "allowPrivilegeEscalation" $sc.allowPrivilegeEscalation }}{{ end -}}
{{- $caps := dict -}}
{{- with ($sc.capabilities | default dict) -}}
{{- with .drop }}{{ $_ := set $caps "drop" . }}{{ end -}}
{{- with .add }}{{ $_ := set $caps "add" . }}{{ end -}}
{{- end -}}
{{- with $caps }}{{ $_ := set $out "capabilities" . }}{{ end -}}
{{- with $out }}{{ toYaml . }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* ---------------------------------------------------------------------------------
Ray containers. Head and workers get the same environment: NeMo RL forwards the driver's
(head's) environment to every Ray actor, so a variable that differed would be overwritten.
--------------------------------------------------------------------------------- */}}

{{/* "true" when the GPU workers have RDMA NICs and NCCL uses gIB (network.mode rdma or dranet), else "". */}}
{{- define "nemo-rl-gke.gib" -}}
{{- if has .Values.network.mode (list "rdma" "dranet") }}true{{ end -}}
{{- end -}}

{{/* The names of the DRA objects: the ComputeDomain, its channel's ResourceClaimTemplate (made by
NVIDIA's DRA driver from the ComputeDomain) and the managed-DRANET ResourceClaimTemplate. */}}
{{- define "nemo-rl-gke.computeDomainName" -}}
{{- printf "%s-compute-domain" (include "nemo-rl-gke.fullname" .) -}}
{{- end -}}
{{- define "nemo-rl-gke.channelClaimTemplate" -}}
{{- printf "%s-channel" (include "nemo-rl-gke.fullname" .) -}}
{{- end -}}
{{- define "nemo-rl-gke.rdmaClaimTemplate" -}}
{{- printf "%s-rdma" (include "nemo-rl-gke.fullname" .) -}}
{{- end -}}

{{/* The DRA claims of a GPU worker pod as (name -> ResourceClaimTemplate), JSON: the ComputeDomain's
channel (accelerator.computeDomain) and the RDMA NICs (network.mode dranet). The head claims nothing. */}}
{{- define "nemo-rl-gke.workerClaims" -}}
{{- $claims := dict -}}
{{- if .Values.accelerator.computeDomain -}}
{{- $_ := set $claims "compute-domain-channel" (include "nemo-rl-gke.channelClaimTemplate" .) -}}
{{- end -}}
{{- if eq .Values.network.mode "dranet" -}}
{{- $_ := set $claims "rdma" (include "nemo-rl-gke.rdmaClaimTemplate" .) -}}
{{- end -}}
{{- toJson $claims -}}
{{- end -}}

{{/* NCCL variables as a name -> value map: the mode's defaults, then debug, then extraEnv. */}}
{{- define "nemo-rl-gke.ncclEnvMap" -}}
{{- $env := dict "NCCL_SOCKET_IFNAME" "eth0" "GLOO_SOCKET_IFNAME" "eth0" "TP_SOCKET_IFNAME" "eth0" -}}
{{- if include "nemo-rl-gke.gib" . -}}
{{- $_ := set $env "NCCL_NET" "gIB" -}}
{{- $_ := set $env "NCCL_CROSS_NIC" "0" -}}
{{- $_ := set $env "NCCL_NET_GDR_LEVEL" "PIX" -}}
{{- with .Values.accelerator.ncclTunerConfigPath -}}
{{- $_ := set $env "NCCL_TUNER_CONFIG_PATH" . -}}
{{- end -}}
{{- end -}}
{{- if .Values.nccl.debug -}}
{{- $_ := set $env "NCCL_DEBUG" "INFO" -}}
{{- $_ := set $env "NCCL_DEBUG_SUBSYS" "INIT,NET" -}}
{{- end -}}
{{- range $k, $v := .Values.nccl.extraEnv -}}
{{- $_ := set $env $k $v -}}
{{- end -}}
{{- toJson $env -}}
{{- end -}}

{{/* The Secret holding the tokens, by secrets.source: the existing one, the chart's own
<fullname>-tokens (files, external), or "" (none). */}}
{{- define "nemo-rl-gke.tokenSecret" -}}
{{- $s := .Values.secrets -}}
{{- if eq $s.source "existing" -}}
{{- required "secrets.existingSecret is required when secrets.source is existing" $s.existingSecret -}}
{{- else if or (eq $s.source "files") (eq $s.source "external") -}}
{{- printf "%s-tokens" (include "nemo-rl-gke.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "nemo-rl-gke.rayEnv" -}}
- name: HF_HOME
  value: {{ .Values.storage.hfHome | quote }}
{{- range $k, $v := (include "nemo-rl-gke.ncclEnvMap" . | fromJson) }}
- name: {{ $k | quote }}
  value: {{ $v | quote }}
{{- end }}
{{- with include "nemo-rl-gke.tokenSecret" . }}
{{- if $.Values.secrets.hfTokenKey }}
- name: HF_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $.Values.secrets.hfTokenKey | quote }}
{{- end }}
{{- if $.Values.secrets.wandbApiKeyKey }}
- name: WANDB_API_KEY
  valueFrom:
    secretKeyRef:
      name: {{ . | quote }}
      key: {{ $.Values.secrets.wandbApiKeyKey | quote }}
{{- end }}
{{- end }}
{{- range .Values.extraEnv }}
- name: {{ .name | quote }}
  value: {{ .value | quote }}
{{- end }}
{{- end -}}

{{/* The Ray container's script. KubeRay runs it instead of its own command because the
RayCluster carries ray.io/overwrite-container-cmd: "true"; it must then exec the generated
`ray start` itself. Nothing is installed here: the image is used as it is. */}}
{{- define "nemo-rl-gke.rayStartScript" -}}
{{- $ctx := .ctx -}}
set -euo pipefail
ulimit -n 65536
{{- if .gib }}
gib_env=/usr/local/gib/scripts/set_nccl_env.sh
if [ ! -r "$gib_env" ]; then
  echo "gIB not found at /usr/local/gib: the NCCL RDMA installer has not run on this node; refusing to start (NCCL would silently fall back to TCP)." >&2
  exit 1
fi
# set_nccl_env.sh sets gIB's defaults; the values chosen in the chart win over them.
chart_nccl="$(declare -px {{ keys (include "nemo-rl-gke.ncclEnvMap" $ctx | fromJson) | sortAlpha | join " " }} 2>/dev/null || true)"
set +u
. "$gib_env"
set -u
eval "$chart_nccl"
{{- end }}
export LD_LIBRARY_PATH="/usr/local/gib/lib64:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"
exec ${KUBERAY_GEN_RAY_START_CMD}
{{- end -}}

{{/* Readiness and liveness of a Ray container, by an HTTP health endpoint of Ray. Call with
(dict "path" P "port" N). */}}
{{- define "nemo-rl-gke.rayProbes" -}}
readinessProbe:
  httpGet:
    path: {{ .path }}
    port: {{ .port }}
  initialDelaySeconds: 10
  periodSeconds: 5
  timeoutSeconds: 2
  failureThreshold: 10
livenessProbe:
  httpGet:
    path: {{ .path }}
    port: {{ .port }}
  initialDelaySeconds: 30
  periodSeconds: 10
  timeoutSeconds: 5
  failureThreshold: 60
{{- end -}}

{{- define "nemo-rl-gke.fluentBitContainer" -}}
{{- with .Values.logging.fluentBit }}
- name: fluent-bit
  image: "{{ .image.repository }}:{{ .image.tag }}"
  imagePullPolicy: {{ .image.pullPolicy }}
  {{- with .resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  # It only reads Ray's log files and prints them: nothing to write, no privilege to gain.
  securityContext:
    readOnlyRootFilesystem: true
    allowPrivilegeEscalation: false
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: fluent-bit-config
      mountPath: /fluent-bit/etc/
      readOnly: true
    - name: ray-logs
      mountPath: /tmp/ray
      readOnly: true
{{- end }}
{{- end -}}

{{/* Volumes every Ray pod has: the shared claim, /dev/shm and (with fluent-bit) the logs. */}}
{{- define "nemo-rl-gke.commonVolumes" -}}
- name: shared-data
  persistentVolumeClaim:
    claimName: {{ include "nemo-rl-gke.claimName" .ctx | quote }}
- name: dshm
  emptyDir:
    medium: Memory
    sizeLimit: {{ .shmSize }}
{{- if .ctx.Values.logging.fluentBit.enabled }}
- name: ray-logs
  emptyDir: {}
- name: fluent-bit-config
  configMap:
    name: {{ include "nemo-rl-gke.fullname" .ctx }}-fluent-bit
{{- end }}
{{- end -}}

{{- define "nemo-rl-gke.commonMounts" -}}
- name: shared-data
  mountPath: {{ .Values.storage.mountPath }}
- name: dshm
  mountPath: /dev/shm
{{- if .Values.logging.fluentBit.enabled }}
- name: ray-logs
  mountPath: /tmp/ray
{{- end }}
{{- end -}}

{{/* Autopilot: select nodes that carry the image on a secondary boot disk (image.preload). */}}
{{- define "nemo-rl-gke.preloadSelector" -}}
{{- with .Values.image.preload }}
{{- if and (eq $.Values.gke.mode "autopilot") .diskImage }}
cloud.google.com.node-restriction.kubernetes.io/gke-secondary-boot-disk-{{ .diskImage }}: CONTAINER_IMAGE_CACHE.{{ required "image.preload.project is required with image.preload.diskImage" .project }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Scheduling of one worker group by its provisioning model. */}}
{{- define "nemo-rl-gke.provisioningSelector" -}}
{{- $p := .provisioning -}}
{{- if eq $p "spot" }}
cloud.google.com/gke-spot: "true"
{{- else if eq $p "flex-start" }}
cloud.google.com/gke-flex-start: "true"
{{- else if eq $p "reservation" }}
cloud.google.com/reservation-name: {{ required (printf "workerGroups[%s].reservationName is required when provisioning is reservation" .name) .reservationName | quote }}
cloud.google.com/reservation-affinity: "specific"
{{- with .reservationProject }}
# A reservation shared from another project is found by its owner's project too.
cloud.google.com/reservation-project: {{ . | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{- define "nemo-rl-gke.provisioningTolerations" -}}
- key: nvidia.com/gpu
  operator: Exists
  effect: NoSchedule
{{- if eq .provisioning "spot" }}
- key: cloud.google.com/gke-spot
  operator: Equal
  value: "true"
  effect: NoSchedule
- key: cloud.google.com/impending-node-termination
  operator: Exists
{{- else if eq .provisioning "flex-start" }}
- key: cloud.google.com/gke-queued
  operator: Exists
  effect: NoSchedule
{{- end }}
{{- end -}}

{{/* The GKE multi-network annotation of a GPU worker: eth0 on the default network, eth1 on
the gVNIC network, eth2.. on the RDMA networks, in order; names equal the Network objects. */}}
{{- define "nemo-rl-gke.interfaces" -}}
{{- $ifs := list (dict "interfaceName" "eth0" "network" .Values.network.defaultNetwork) -}}
{{- $ifs = append $ifs (dict "interfaceName" "eth1" "network" .Values.network.gvnic.name) -}}
{{- range $i, $n := .Values.network.rdma -}}
{{- $ifs = append $ifs (dict "interfaceName" (printf "eth%d" (add $i 2)) "network" $n.name) -}}
{{- end -}}
{{- toJson $ifs -}}
{{- end -}}
