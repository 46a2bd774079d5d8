{{/* ---------------------------------------------------------------------------------
Pod templates of the launcher and preparation Jobs. Each Job's name carries a hash of its pod
template: a Job's template is immutable, so an upgrade that changes anything in it (resources,
image, the run's ConfigMap, the claim, a Secret name) must create a new Job, and one that changes
nothing must keep the old one.
--------------------------------------------------------------------------------- */}}

{{- define "nemo-rl-gke.launcherPod" -}}
metadata:
  labels:
    {{- include "nemo-rl-gke.stableLabels" (dict "ctx" . "component" "launcher") | nindent 4 }}
spec:
  restartPolicy: Never
  {{- include "nemo-rl-gke.jobPodSecurity" (dict "ctx" . "launcher" true "runAsUser" .Values.launcher.runAsUser) | nindent 2 }}
  affinity:
    # Land next to the Ray head, whose node already holds the NeMo RL image.
    podAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector:
              matchLabels:
                ray.io/cluster: {{ include "nemo-rl-gke.fullname" . }}
                ray.io/node-type: head
  containers:
    - name: launcher
      image: {{ include "nemo-rl-gke.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["python", "/etc/nemo-rl-gke/launcher.py", "/etc/nemo-rl-gke/launch.json"]
      env:
        - name: PYTHONUNBUFFERED
          value: "1"
        {{- include "nemo-rl-gke.jobScratchEnv" . | nindent 8 }}
      {{- include "nemo-rl-gke.containerSecurity" . | nindent 6 }}
      resources:
        {{- toYaml .Values.launcher.resources | nindent 8 }}
      volumeMounts:
        - name: run-files
          mountPath: /etc/nemo-rl-gke
          readOnly: true
        {{- include "nemo-rl-gke.jobScratch" (dict "mount" true) | nindent 8 }}
        # Read-only: the launcher only looks at checkpoints and the preparation marker.
        - name: shared-data
          mountPath: {{ .Values.storage.mountPath }}
          readOnly: true
        {{- with include "nemo-rl-gke.outcomeSubPath" . }}
        # Read-write, the launcher's folder in the run's folder only: the run's outcome.
        - name: shared-data
          mountPath: {{ include "nemo-rl-gke.outcomeMountPath" $ }}
          subPath: {{ . | quote }}
        {{- end }}
  volumes:
    - name: run-files
      configMap:
        name: {{ include "nemo-rl-gke.runConfigMapName" . }}
    {{- include "nemo-rl-gke.jobScratch" (dict "mount" false) | nindent 4 }}
    # Read-only per mount above (a claim-level readOnly would make the outcome folder read-only too).
    - name: shared-data
      persistentVolumeClaim:
        claimName: {{ include "nemo-rl-gke.claimName" . | quote }}
{{- end -}}

{{- define "nemo-rl-gke.preparePod" -}}
metadata:
  labels:
    {{- include "nemo-rl-gke.stableLabels" (dict "ctx" . "component" "prepare") | nindent 4 }}
spec:
  restartPolicy: Never
  {{- include "nemo-rl-gke.jobPodSecurity" (dict "ctx" . "runAsUser" .Values.prepare.runAsUser) | nindent 2 }}
  containers:
    - name: prepare
      image: {{ include "nemo-rl-gke.image" . }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      command: ["python", "/etc/nemo-rl-gke/prepare.py", "/etc/nemo-rl-gke/prepare.json"]
      env:
        - name: PYTHONUNBUFFERED
          value: "1"
        {{- include "nemo-rl-gke.jobScratchEnv" . | nindent 8 }}
        - name: HF_HOME
          value: {{ .Values.storage.hfHome | quote }}
        {{- with include "nemo-rl-gke.tokenSecret" . }}
        {{- if $.Values.secrets.hfTokenKey }}
        - name: HF_TOKEN
          valueFrom:
            secretKeyRef:
              name: {{ . | quote }}
              key: {{ $.Values.secrets.hfTokenKey | quote }}
        {{- end }}
        {{- end }}
      {{- include "nemo-rl-gke.containerSecurity" . | nindent 6 }}
      resources:
        {{- toYaml .Values.prepare.resources | nindent 8 }}
      volumeMounts:
        - name: run-files
          mountPath: /etc/nemo-rl-gke
          readOnly: true
        {{- include "nemo-rl-gke.jobScratch" (dict "mount" true) | nindent 8 }}
        - name: shared-data
          mountPath: {{ .Values.storage.mountPath }}
  volumes:
    - name: run-files
      configMap:
        name: {{ include "nemo-rl-gke.runConfigMapName" . }}
    {{- include "nemo-rl-gke.jobScratch" (dict "mount" false) | nindent 4 }}
    - name: shared-data
      persistentVolumeClaim:
        claimName: {{ include "nemo-rl-gke.claimName" . | quote }}
{{- end -}}
