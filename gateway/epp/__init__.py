"""The Endpoint Picker: graystack inside a user's GIE gateway. The gateway asks it, over Envoy's ext_proc
(GIE's protocol v1.0.0), which pod serves each request; it answers with a pod of the variant the rollout
wants for that request. A pure core (wanted, choice, picker, protocol) under the gRPC edges (service,
health, tls, server)."""
