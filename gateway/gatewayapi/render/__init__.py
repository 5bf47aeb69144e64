"""`graystack render`: the objects a user applies to their own Gateway API gateway (Envoy Gateway, Istio) so
that its proxies send graystack the answer log, with the answer filter where the gateway can carry it.
Pure builders, like gateway/envoy/: the spec and the options in, Kubernetes objects as dicts out."""
