{{/*
Object names are fixed (gpu-scheduler, gpu-scheduler-webhook, ...), as in manifests/: the alerts, the dashboard,
the docs and the webhook configuration (cluster-scoped) name them, so one release per cluster.
*/}}

{{/* Labels on every object: Helm's standard ones, and the part-of label manifests/ gives. */}}
{{- define "gpu-scheduler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: gpu-scheduler
{{- end }}

{{/* The gpu-scheduler image: repository@digest, or repository:tag (the appVersion by default). */}}
{{- define "gpu-scheduler.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* image and imagePullPolicy of a gpu-scheduler container. */}}
{{- define "gpu-scheduler.container-image" -}}
image: {{ include "gpu-scheduler.image" . }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* The ConfigMap webhook and scheduler watch: the chart's, or the admin's own. */}}
{{- define "gpu-scheduler.configMap" -}}
{{ .Values.existingConfigMap | default "gpu-scheduler-config" }}
{{- end }}

{{/* Pod-level settings every pod of the chart shares: the hardened security context and where it may run. */}}
{{- define "gpu-scheduler.podSpec" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile: {type: RuntimeDefault}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* One replica per node where it can: spread over kubernetes.io/hostname. */}}
{{- define "gpu-scheduler.spread" -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        app.kubernetes.io/name: {{ . }}
{{- end }}

{{/* A container's hardened security context: no privilege escalation, read-only root, no capabilities. */}}
{{- define "gpu-scheduler.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
{{- end }}

{{/* Pod template metadata: the component's name label, and the admin's podAnnotations. */}}
{{- define "gpu-scheduler.podMetadata" -}}
labels:
  app.kubernetes.io/name: {{ .name }}
{{- with .root.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* A RoleBinding's or ClusterRoleBinding's one subject: a service account of the release's namespace. */}}
{{- define "gpu-scheduler.subject" -}}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ .root.Release.Namespace }}
{{- end }}

{{/* The second kube-scheduler's configuration (mode: extender); manifests/components/extender/
kube-scheduler-config.yaml explains each field. */}}
{{- define "gpu-scheduler.kubeSchedulerConfig" -}}
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  resourceNamespace: {{ .Release.Namespace }}
  resourceName: gpu-kube-scheduler
profiles:
  - schedulerName: gpu-scheduler
extenders:
  - urlPrefix: http://gpu-scheduler-extender.{{ .Release.Namespace }}.svc:8888
    filterVerb: filter
    prioritizeVerb: prioritize
    bindVerb: bind
    preemptVerb: preempt
    weight: 5
    nodeCacheCapable: true
    enableHTTPS: false
    httpTimeout: 5s
    ignorable: false
{{- end }}

{{/* A PodDisruptionBudget keeping minAvailable replicas of a component through drains. Arguments: root, name (the
component's app.kubernetes.io/name), replicas, budget ({enabled, minAvailable}), path (of the budget in values). */}}
{{- define "gpu-scheduler.podDisruptionBudget" -}}
{{- if .budget.enabled }}
{{- if ge (int .budget.minAvailable) (int .replicas) }}
{{- fail (printf "%s.minAvailable (%d) must be below the replicas (%d), or no node running a replica can ever be drained; raise the replicas or set %s.enabled=false" .path (int .budget.minAvailable) (int .replicas) .path) }}
{{- end }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "gpu-scheduler.labels" .root | nindent 4 }}
spec:
  minAvailable: {{ .budget.minAvailable }}
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
{{- end }}
{{- end }}

{{/* A NetworkPolicy letting ingress reach a component's serving port only, so it keeps working in namespaces that
deny ingress by default; egress stays open (the apiserver's and Prometheus' addresses are the cluster's). Arguments:
root, name, port. */}}
{{- define "gpu-scheduler.networkPolicy" -}}
{{- if .root.Values.networkPolicy.enabled }}
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: {{ .name }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "gpu-scheduler.labels" .root | nindent 4 }}
spec:
  podSelector:
    matchLabels:
      app.kubernetes.io/name: {{ .name }}
  policyTypes: [Ingress]
  ingress:
    - ports:
        - {protocol: TCP, port: {{ .port }}}
{{- end }}
{{- end }}
