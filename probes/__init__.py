"""The probe sidecar: the pod's weight-erasure status and a synthetic request's latency, as metrics."""
