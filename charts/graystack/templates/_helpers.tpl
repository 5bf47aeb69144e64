{{/* Names, labels and the pieces every workload shares. */}}

{{- define "graystack.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "graystack.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's name: fullname-component, within the 63 characters a Service name allows. */}}
{{- define "graystack.componentName" -}}
{{- printf "%s-%s" (include "graystack.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "graystack.selectorLabels" -}}
app.kubernetes.io/name: {{ include "graystack.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "graystack.labels" -}}
{{ include "graystack.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: graystack
{{- end -}}

{{- define "graystack.image" -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}

{{- define "graystack.specConfigMap" -}}{{ include "graystack.componentName" (dict "root" . "component" "spec") }}{{- end -}}
{{- define "graystack.stateConfigMap" -}}{{ include "graystack.componentName" (dict "root" . "component" "rollout-state") }}{{- end -}}
{{- define "graystack.lease" -}}{{ include "graystack.componentName" (dict "root" . "component" "gateway-leader") }}{{- end -}}
{{- define "graystack.adminService" -}}{{ include "graystack.componentName" (dict "root" . "component" "gateway-admin") }}{{- end -}}
{{- define "graystack.adminSecret" -}}{{ include "graystack.componentName" (dict "root" . "component" "admin-token") }}{{- end -}}
{{- define "graystack.alsService" -}}{{ include "graystack.componentName" (dict "root" . "component" "als") }}{{- end -}}
{{- define "graystack.eppService" -}}{{ include "graystack.componentName" (dict "root" . "component" "epp") }}{{- end -}}
{{/* The namespace of the InferencePool the Endpoint Picker serves (left out: the release's). */}}
{{/* The port of the picker the gateway replicas serve (endpointPicker's or envoyPicker's; empty: none):
one Service, container port and network rule for either. */}}
{{- define "graystack.eppPort" -}}
{{- if .Values.endpointPicker.enabled -}}{{ .Values.endpointPicker.port }}{{- else if .Values.envoyPicker.enabled -}}{{ .Values.envoyPicker.port }}{{- end -}}
{{- end -}}
{{- define "graystack.eppNamespace" -}}{{ .Values.endpointPicker.pool.namespace | default .Release.Namespace }}{{- end -}}

{{/* Whether `helm test` runs: its pod and its header rules go through graystack's Envoy, which Gateway API
mode does not run (its rules would become rules of the user's routes). */}}
{{- define "graystack.helmTest" -}}
{{- if and .Values.helmTest.enabled (not .Values.gatewayApi.enabled) -}}true{{- end -}}
{{- end -}}

{{/* gatewayApi.routes as JSON, each with its namespace (left out: the release's). */}}
{{- define "graystack.gatewayApiRoutes" -}}
{{- $routes := list -}}
{{- range .Values.gatewayApi.routes -}}
{{- $routes = append $routes (dict "name" .name "namespace" (.namespace | default $.Release.Namespace)) -}}
{{- end -}}
{{- toJson $routes -}}
{{- end -}}

{{/* The pod-level parts every workload shares. */}}
{{- define "graystack.podCommon" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The rollout spec the gateway watches: the values' `rollout`, with variants from `variants`. Envoy
health-checks each variant on its server's own readiness path (vLLM: /health; graystack: /readyz), and
balances its pods by its `loadBalancing` (unset: the gateway's default). In Gateway API mode `gateway_api`
comes from `gatewayApi`, with a backendRef for every enabled variant and none for another; with the
Endpoint Picker on, `endpoint_picker` from `endpointPicker` (its `values` keyed by enabled variants only);
with envoyPicker on, `envoy_picker` served by the gateway replicas, Envoy dialing their epp Service. */}}
{{- define "graystack.spec" -}}
{{- $variants := dict -}}
{{- range $name, $v := .Values.variants -}}
{{- if $v.enabled -}}
{{- $variant := dict "service" (include "graystack.componentName" (dict "root" $ "component" $name)) "port" (int $v.server.port) -}}
{{- if $v.server.readinessPath -}}
{{- $_ := set $variant "health_check" (dict "path" $v.server.readinessPath) -}}
{{- end -}}
{{- with $v.loadBalancing -}}
{{- $_ := set $variant "load_balancing" . -}}
{{- end -}}
{{- $_ := set $variants $name $variant -}}
{{- end -}}
{{- end -}}
{{- $spec := omit (deepCopy .Values.rollout) "capacity" -}}
{{- $_ := set $spec "variants" $variants -}}
{{- with .Values.gatewayApi -}}
{{- if .enabled -}}
{{- range $name, $_ := $variants -}}
{{- if not (hasKey $.Values.gatewayApi.backends $name) -}}
{{- fail (printf "gatewayApi.backends: no backendRef for variant %s: its Service {name, port} or {kind: InferencePool, name}, as the routes reference it" $name) -}}
{{- end -}}
{{- end -}}
{{- range $name, $_ := .backends -}}
{{- if not (hasKey $variants $name) -}}
{{- fail (printf "gatewayApi.backends.%s: no enabled variant %s in variants" $name $name) -}}
{{- end -}}
{{- end -}}
{{- $routes := include "graystack.gatewayApiRoutes" $ | fromJsonArray -}}
{{- $_ := set $spec "gateway_api" (dict "routes" $routes "backends" .backends "on_drift" .onDrift "mirror" .mirror "answer_filter" .answerFilter "settle" .settle) -}}
{{- end -}}
{{- end -}}
{{- with .Values.endpointPicker -}}
{{- if .enabled -}}
{{- $marks := dict -}}{{/* label value: the variant whose pods it marks */}}
{{- range $name, $value := .values -}}
{{- if not (hasKey $variants $name) -}}
{{- fail (printf "endpointPicker.values.%s: no enabled variant %s in variants" $name $name) -}}
{{- end -}}
{{- end -}}
{{- range $name, $_ := $variants -}}
{{- if not (hasKey (default (dict) $.Values.endpointPicker.models) $name) -}}
{{- $mark := get $.Values.endpointPicker.values $name | default $name -}}
{{- if hasKey $marks $mark -}}
{{- fail (printf "endpointPicker.values: variants %s and %s share the label value %s" (get $marks $mark) $name $mark) -}}
{{- end -}}
{{- $_ := set $marks $mark $name -}}
{{- end -}}
{{- end -}}
{{- $_ := set $spec "endpoint_picker" (dict "pool" .pool.name "namespace" (include "graystack.eppNamespace" $) "variant_label" .variantLabel "values" .values "models" (default (dict) .models)) -}}
{{- end -}}
{{- end -}}
{{- with .Values.envoyPicker -}}
{{- if .enabled -}}
{{- if $.Values.endpointPicker.enabled -}}
{{- fail "envoyPicker.enabled, endpointPicker.enabled: one or the other: endpointPicker serves your GIE gateway, where graystack's Envoy carries no traffic" -}}
{{- end -}}
{{- if $.Values.gatewayApi.enabled -}}
{{- fail "envoyPicker.enabled, gatewayApi.enabled: in Gateway API mode graystack's Envoy carries no traffic to pick for" -}}
{{- end -}}
{{- if $spec.retries.fallback -}}
{{- fail "envoyPicker.enabled, rollout.retries.fallback: Envoy's fallback cluster drops the picker's pick; set rollout.retries.fallback=null" -}}
{{- end -}}
{{- $host := printf "%s.%s.svc" (include "graystack.eppService" $) $.Release.Namespace -}}
{{- $_ := set $spec "envoy_picker" (dict "host" $host "port" (int .port) "tls" .tls "timeout" .timeout "serve" true "scorers" .scorers) -}}
{{- end -}}
{{- end -}}
{{- if include "graystack.helmTest" . -}}
{{- $routing := deepCopy $spec.routing -}}
{{- $rules := default (list) $routing.rules -}}
{{- range $name, $v := $variants -}}
{{- $rules = append $rules (dict "value" (printf "graystack-test-%s" $name) "variant" $name) -}}
{{- end -}}
{{- $_ := set $routing "rules" $rules -}}
{{- $_ := set $spec "routing" $routing -}}
{{- end -}}
{{- toYaml $spec -}}
{{- end -}}

{{/* rollout.capacity as kube-gateway's --capacity JSON: each listed variant with its Deployment's name and
its pods' GPUs (variants.<name>.gpu.count), which the GPU-hour price turns into a cost. */}}
{{- define "graystack.capacity" -}}
{{- $c := .Values.rollout.capacity -}}
{{- $variants := dict -}}
{{- range $name, $v := $c.variants -}}
{{- if not (and (hasKey $.Values.variants $name) (get $.Values.variants $name).enabled) -}}
{{- fail (printf "rollout.capacity.variants.%s: no enabled variant %s in variants" $name $name) -}}
{{- end -}}
{{- $hpa := include "graystack.capacityHpa" (dict "root" $ "name" $name "capacity" $v) -}}
{{- $gpus := ((get $.Values.variants $name).gpu | default dict).count | default 0 -}}
{{- $_ := set $variants $name (merge (dict "deployment" (include "graystack.componentName" (dict "root" $ "component" $name)) "hpa" $hpa "gpusPerPod" $gpus) (omit $v "hpa")) -}}
{{- end -}}
{{- $segments := deepCopy ($c.segments | default dict) -}}
{{- if include "graystack.helmTest" . -}}{{/* `helm test`'s own rules carry a handful of requests */}}
{{- range $name, $v := .Values.variants -}}
{{- if $v.enabled -}}{{- $_ := set $segments (printf "graystack-test-%s" $name) 0 -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $shares := 0 -}}
{{- range $value, $share := $c.segments -}}{{- $shares = add $shares $share -}}{{- end -}}
{{- if gt (int $shares) 100 -}}
{{- fail (printf "rollout.capacity.segments: the shares add up to %d%%, over 100" (int $shares)) -}}
{{- end -}}
{{- toJson (dict "fleetReplicas" $c.fleetReplicas "readyTimeout" $c.readyTimeout "warmup" $c.warmup "scaleDownDelay" $c.scaleDownDelay "gpuHourPrice" ($c.gpuHourPrice | default 0) "segments" $segments "variants" $variants) -}}
{{- end -}}

{{/* The HPA a capacity variant's minReplicas goes to: the one named in rollout.capacity, else the chart's
own (variants.<name>.autoscaling), else none (its Deployment's replicas are set). */}}
{{- define "graystack.capacityHpa" -}}
{{- $variant := get .root.Values.variants .name | default dict -}}
{{- if .capacity.hpa -}}
{{- .capacity.hpa -}}
{{- else if ($variant.autoscaling | default dict).enabled -}}
{{- include "graystack.componentName" (dict "root" .root "component" .name) -}}
{{- end -}}
{{- end -}}

{{/* Whether something other than the Deployment's own `replicas` sizes the variant: its HPA, or the
gateway (rollout.capacity). Then the Deployment leaves `replicas` out, or every upgrade would reset it. */}}
{{- define "graystack.replicasOwned" -}}
{{- $variant := get .root.Values.variants .name -}}
{{- $capacity := .root.Values.rollout.capacity -}}
{{- if or ($variant.autoscaling | default dict).enabled (and $capacity.enabled (hasKey $capacity.variants .name)) -}}true{{- end -}}
{{- end -}}
