{{/* Names and labels shared by every object of a release. */}}

{{- define "strait.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "strait.fullname" -}}
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

{{- define "strait.selectorLabels" -}}
app.kubernetes.io/name: {{ include "strait.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "strait.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "strait.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "strait.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "strait.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "strait.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "strait.scheme" -}}
{{- if .Values.tls.secretName }}HTTPS{{ else }}HTTP{{ end }}
{{- end }}

{{/*
The configuration file: .Values.config with the keys the chart manages set from its Secrets.
*/}}
{{- define "strait.config" -}}
{{- /* Where `strait ... --config` run inside a controller pod finds the API; the controller
itself listens on every address (--listen). */}}
{{- $controller := dict "listen" (printf "127.0.0.1:%v" .Values.controller.port) }}
{{- if .Values.apiToken.secretName }}
{{- $_ := set $controller "api_token" (printf "${file:/etc/strait/api-token/%s}" .Values.apiToken.key) }}
{{- end }}
{{- if .Values.tls.secretName }}
{{- $tls := dict "cert" (printf "/etc/strait/tls/%s" .Values.tls.certKey) "key" (printf "/etc/strait/tls/%s" .Values.tls.keyKey) }}
{{- if .Values.tls.caKey }}
{{- $_ := set $tls "ca" (printf "/etc/strait/tls/%s" .Values.tls.caKey) }}
{{- end }}
{{- $_ := set $controller "tls" $tls }}
{{- end }}
{{- $managed := dict }}
{{- if .Values.coordination.kafka.cluster }}
{{- $_ := set $managed "coordination" (dict "kafka" .Values.coordination.kafka) }}
{{- else }}
{{- $_ := set $managed "coordination" (dict "zookeeper" .Values.coordination.zookeeper) }}
{{- end }}
{{- $_ := set $managed "controller" $controller }}
{{- if .Values.metricsToken.secretName }}
{{- $_ := set $managed "observability" (dict "metrics_token" (printf "${file:/etc/strait/metrics-token/%s}" .Values.metricsToken.key)) }}
{{- end }}
{{- toYaml (mustMergeOverwrite (deepCopy .Values.config) $managed) }}
{{- end }}

{{/* Environment every Strait container gets: its pod's name and IP, secrets, extra overrides. */}}
{{- define "strait.env" -}}
- name: POD_NAME
  valueFrom:
    fieldRef: {fieldPath: metadata.name}
- name: POD_IP
  valueFrom:
    fieldRef: {fieldPath: status.podIP}
{{- range .Values.secretEnv }}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secretName }}
      key: {{ .key }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Volumes every Strait pod mounts: the config, the Secrets, and writable /tmp and home. */}}
{{- define "strait.volumes" -}}
- name: config
  configMap:
    name: {{ include "strait.fullname" . }}
- name: tmp
  emptyDir: {}
- name: home
  emptyDir: {}
{{- range .Values.secretFiles }}
- name: secret-{{ .name }}
  secret:
    secretName: {{ .secretName }}
    defaultMode: 0440
{{- end }}
{{- if .Values.apiToken.secretName }}
- name: api-token
  secret:
    secretName: {{ .Values.apiToken.secretName }}
    defaultMode: 0440
{{- end }}
{{- if .Values.tls.secretName }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
    defaultMode: 0440
{{- end }}
{{- if .Values.metricsToken.secretName }}
- name: metrics-token
  secret:
    secretName: {{ .Values.metricsToken.secretName }}
    defaultMode: 0440
{{- end }}
{{- end }}

{{- define "strait.volumeMounts" -}}
- name: config
  mountPath: /etc/strait/config
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: home
  mountPath: /var/lib/strait
{{- range .Values.secretFiles }}
- name: secret-{{ .name }}
  mountPath: /etc/strait/secrets/{{ .name }}
  readOnly: true
{{- end }}
{{- if .Values.apiToken.secretName }}
- name: api-token
  mountPath: /etc/strait/api-token
  readOnly: true
{{- end }}
{{- if .Values.tls.secretName }}
- name: tls
  mountPath: /etc/strait/tls
  readOnly: true
{{- end }}
{{- if .Values.metricsToken.secretName }}
- name: metrics-token
  mountPath: /etc/strait/metrics-token
  readOnly: true
{{- end }}
{{- end }}

{{/* Spread pods of one component over nodes unless the values say where they go. */}}
{{- define "strait.affinity" -}}
{{- $root := index . 0 }}
{{- $component := index . 1 }}
{{- $affinity := index . 2 }}
{{- if $affinity }}
{{- toYaml $affinity }}
{{- else -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "strait.selectorLabels" $root | nindent 12 }}
            app.kubernetes.io/component: {{ $component }}
{{- end }}
{{- end }}

{{/* A probe from the values, its httpGet speaking HTTPS when the chart serves TLS. */}}
{{- define "strait.probe" -}}
{{- $root := index . 0 }}
{{- $probe := deepCopy (index . 1) }}
{{- if $probe.httpGet }}
{{- $_ := set $probe.httpGet "scheme" (include "strait.scheme" $root) }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/* A worker probe: GET /metrics on the metrics port, or a TCP check when /metrics needs a token. */}}
{{- define "strait.workerProbe" -}}
{{- $root := index . 0 }}
{{- $probe := deepCopy (index . 1) }}
{{- if $root.Values.metricsToken.secretName }}
{{- $_ := set $probe "tcpSocket" (dict "port" "metrics") }}
{{- else }}
{{- $_ := set $probe "httpGet" (dict "path" "/metrics" "port" "metrics" "scheme" (include "strait.scheme" $root)) }}
{{- end }}
{{- toYaml $probe }}
{{- end }}
