{{/* The scaler's name: <release>-scaler, or the release name when it already says wool-scaler. */}}
{{- define "wool.scalerName" -}}
{{- if contains "scaler" .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-scaler" .Release.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "wool.workersName" -}}
{{- .Values.workers.name | default (printf "%s-workers" .Release.Name) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "wool.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ .Values.serviceAccount.name | default (include "wool.scalerName" .) }}
{{- else -}}{{ .Values.serviceAccount.name | default "default" }}{{- end -}}
{{- end -}}

{{/* An image reference: repository@digest when a digest is given, else repository:tag. */}}
{{- define "wool.image" -}}
{{- if .image.digest -}}{{ .image.repository }}@{{ .image.digest }}
{{- else -}}{{ .image.repository }}:{{ .image.tag | default .chart.AppVersion }}{{- end -}}
{{- end -}}

{{- define "wool.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: wool
{{- end -}}

{{- define "wool.scalerSelector" -}}
app.kubernetes.io/name: wool-scaler
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "wool.workersSelector" -}}
app.kubernetes.io/name: wool-worker
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* The pod and container security context both programs run with: the images' user. */}}
{{- define "wool.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "wool.securityContext" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
privileged: false
capabilities: {drop: [ALL]}
{{- end -}}

{{/* kind wool: the seconds in-flight tasks run after SIGTERM (workers.grace, default
terminationGracePeriodSeconds - 10: the stop's last 10 s close Wool's task loop and its calls). */}}
{{- define "wool.workersGrace" -}}
{{- $w := .Values.workers -}}
{{- if kindIs "invalid" $w.grace -}}{{ max 0 (sub (int $w.terminationGracePeriodSeconds) 10) }}
{{- else -}}{{ int $w.grace }}{{- end -}}
{{- end -}}

{{- define "wool.clientRoleName" -}}
{{- printf "%s-client" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Checks across values that values.schema.json cannot state with a clear message. */}}
{{- define "wool.validate" -}}
{{- $w := .Values.workers -}}
{{- if and $w.enabled (eq $w.kind "wool") -}}
{{- if not $w.wool.imports -}}
{{- fail "workers.wool.imports: kind wool needs the application's modules (at least one --import)" -}}
{{- end -}}
{{- if not $w.wool.version -}}
{{- fail "workers.wool.version: kind wool needs the image's Wool version (annotation wool.libwool.dev/version)" -}}
{{- end -}}
{{- if eq $w.image.repository "ghcr.io/libwool/wool-worker" -}}
{{- fail "workers.image.repository: kind wool runs the application's image (with libwool-kubernetes installed), not wool-worker" -}}
{{- end -}}
{{- if and (not $w.image.tag) (not $w.image.digest) -}}
{{- fail "workers.image.tag: kind wool needs the application image's tag or digest" -}}
{{- end -}}
{{- if ge (int (include "wool.workersGrace" .)) (int $w.terminationGracePeriodSeconds) -}}
{{- fail (printf "workers.grace: %s s is not less than workers.terminationGracePeriodSeconds (%v): the kubelet would kill the worker before its grace ends (leave 10 s)" (include "wool.workersGrace" .) $w.terminationGracePeriodSeconds) -}}
{{- end -}}
{{- if and $w.wool.identity (not $w.tls.enabled) -}}
{{- fail "workers.wool.identity: an identity is carried by the certificate: set workers.tls.enabled" -}}
{{- end -}}
{{- end -}}
{{- if and $w.enabled (eq $w.kind "reference") $w.tls.oneWay -}}
{{- fail "workers.tls.oneWay: kind reference serves mutual TLS only; oneWay is for kind wool" -}}
{{- end -}}
{{- $ttl := toString .Values.scaler.demand.ttl -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $ttl -}}
{{- $unit := trimPrefix $number $ttl -}}
{{- $perUnit := dict "" 1.0 "s" 1.0 "ms" 0.001 "m" 60.0 "h" 3600.0 "d" 86400.0 -}}
{{- if and $number (hasKey $perUnit $unit) -}}
{{- $seconds := mulf (float64 $number) (get $perUnit $unit) -}}
{{- if or (lt $seconds 1.0) (gt $seconds 3600.0) -}}
{{- fail (printf "scaler.demand.ttl: %s is outside 1 s to 1 h (wool-scaler's --demand-ttl would refuse it at start)" $ttl) -}}
{{- end -}}
{{- end -}}
{{- $f := .Values.scaledObject.fleet -}}
{{- if and $f.targets $f.dnsName -}}
{{- fail "scaledObject.fleet: targets and dnsName are both set; give only the one fleet.source names" -}}
{{- end -}}
{{- if .Values.scaledObject.enabled -}}
{{- if and (eq $f.source "targets") (not $f.targets) -}}
{{- fail "scaledObject.fleet.targets: fleet.source is targets but the list is empty" -}}
{{- end -}}
{{- if and (eq $f.source "namespace") (not $f.namespace) -}}
{{- fail "scaledObject.fleet.namespace: fleet.source is namespace but no namespace is given" -}}
{{- end -}}
{{- if and (eq $f.source "dns") (not $f.dnsName) (not .Values.workers.enabled) -}}
{{- fail "scaledObject.fleet.dnsName: fleet.source is dns: give dnsName, or enable workers (their headless Service)" -}}
{{- end -}}
{{- if and (eq $f.source "pods") (not .Values.rbac.pods) -}}
{{- fail "rbac.pods: fleet.source is pods: the scaler needs get/list/watch on pods (set rbac.pods)" -}}
{{- end -}}
{{- if and (eq $f.source "pods") (not $f.podSelector) (not .Values.workers.enabled) -}}
{{- fail "scaledObject.fleet.podSelector: fleet.source is pods: give podSelector, or enable workers (their pods' labels)" -}}
{{- end -}}
{{- if and .Values.scaledObject.deletionCost (ne $f.source "pods") -}}
{{- fail "scaledObject.deletionCost: needs fleet.source pods (the scaler annotates the pods it watches)" -}}
{{- end -}}
{{- if and .Values.scaledObject.deletionCost (not .Values.rbac.deletionCost) -}}
{{- fail "rbac.deletionCost: scaledObject.deletionCost needs patch on pods (set rbac.deletionCost)" -}}
{{- end -}}
{{- if and (not .Values.scaledObject.scaleTargetName) (not .Values.workers.enabled) -}}
{{- fail "scaledObject.scaleTargetName: give the Deployment to scale, or enable workers" -}}
{{- end -}}
{{- end -}}
{{- end -}}
