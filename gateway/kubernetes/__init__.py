"""Kubernetes mode of the gateway: where the spec, the endpoints and the rollout state live in a cluster.

- `api`: the official client, built from the kubeconfig or the pod's service account; raw JSON calls.
- `reflector`: list + watch with resync, reconnect, and a relist after 410 Gone (client-go's pattern).
- `endpoints`: each `service:` variant's ready pod addresses, from its EndpointSlices.
- `spec_source`: the rollout spec from its ConfigMap; a bad edit is refused and reported as an Event.
- `leader`: leader election on a coordination.k8s.io Lease (every replica serves xDS, one drives).
- `role_label`: the leader's pod labelled `graystack.dev/role: leader`, for the admin Service's selector.
- `state`: the rollout state in a ConfigMap: the controller's state store, written as each step happens.
- `weight`: `graystack weight ... --configmap`: a flip written into the spec ConfigMap.
- `process`: all of that wired into the gateway process (`graystack kube-gateway`).
"""
