{{/* Names and labels shared by every hookstream object. */}}
{{- define "hookstream.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hookstream.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "hookstream.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookstream.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hookstream.labels" -}}
{{ include "hookstream.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "hookstream.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "hookstream.secretName" -}}
{{- default (include "hookstream.fullname" .) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* SPEC S5: endpoint secrets are encrypted at rest; the chart does not render without a key. */}}
{{- define "hookstream.requireSecretKey" -}}
{{- if not .Values.secrets.existingSecret -}}
{{- $_ := required "secrets.secretKey (HOOKSTREAM_SECRET_KEY, at least 16 characters) or secrets.existingSecret (a Secret with a secret-key entry) is required: hookstream encrypts endpoint secrets at rest (SPEC S5)" .Values.secrets.secretKey -}}
{{- end -}}
{{- end -}}

{{- define "hookstream.groupId" -}}
{{- default "hookstream" (index .Values.settings "HOOKSTREAM_GROUP_ID") -}}
{{- end -}}

{{- define "hookstream.topicPrefix" -}}
{{- $prefix := index .Values.settings "HOOKSTREAM_TOPIC_PREFIX" -}}
{{- if kindIs "invalid" $prefix -}}hookstream.{{- else -}}{{ $prefix }}{{- end -}}
{{- end -}}

{{/*
The chart's topics.yaml: files/topics.yaml as it is, or with `.Values.topics` overrides applied to
its `defaults` section (the re-rendered YAML then loses the file's comments).
*/}}
{{- define "hookstream.topicsYaml" -}}
{{- $raw := .Files.Get "files/topics.yaml" -}}
{{- if not $raw -}}{{- fail "files/topics.yaml is missing from the chart" -}}{{- end -}}
{{- $t := .Values.topics -}}
{{- if or $t.replicationFactor $t.minInsyncReplicas $t.partitions -}}
{{- $doc := fromYaml $raw -}}
{{- $defaults := $doc.defaults -}}
{{- if $t.replicationFactor }}{{ $_ := set $defaults "replication_factor" $t.replicationFactor }}{{ end -}}
{{- if $t.partitions }}{{ $_ := set $defaults "partitions" $t.partitions }}{{ end -}}
{{- if $t.minInsyncReplicas -}}
{{- $config := default (dict) $defaults.config -}}
{{- $_ := set $config "min.insync.replicas" $t.minInsyncReplicas -}}
{{- $_ := set $defaults "config" $config -}}
{{- end -}}
{{- toYaml $doc -}}
{{- else -}}
{{- $raw -}}
{{- end -}}
{{- end -}}

{{/* The data of the settings ConfigMap: non-secret settings plus topics.yaml. */}}
{{- define "hookstream.configData" -}}
{{- range $key, $value := .Values.settings }}
{{ $key }}: {{ $value | toString | quote }}
{{- end }}
topics.yaml: |
{{ include "hookstream.topicsYaml" . | indent 2 }}
{{- end -}}

{{/* Environment of every hookstream container: the settings ConfigMap `$cm` plus chart-owned values. */}}
{{- define "hookstream.env" -}}
{{- $root := .root -}}
{{- range $key, $value := $root.Values.settings }}
- name: {{ $key }}
  valueFrom:
    configMapKeyRef:
      name: {{ $.configMap }}
      key: {{ $key }}
{{- end }}
- name: HOOKSTREAM_WEB_HOST
  value: "0.0.0.0"
- name: HOOKSTREAM_WEB_PORT
  value: {{ $root.Values.service.port | quote }}
- name: HOOKSTREAM_DATA_DIR
  value: /var/lib/hookstream
- name: HOOKSTREAM_TOPICS_FILE
  value: /etc/hookstream/topics.yaml
{{- end -}}

{{- define "hookstream.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "hookstream.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
{{- end -}}
