"""The leader's pod carries `graystack.dev/role: leader` (the Patroni/Spilo pattern), so a Service that also
selects on it (the chart's admin Service) always reaches the replica that drives the rollout.

Each replica labels only its own pod (named by the downward API): the leader adds the label, every other
replica takes it off, at its first round too, so a container restarted after a crash clears the label its
predecessor left on the pod. The patch is a JSON merge patch of that one label, so nothing else on the pod
changes. A failed patch is logged and tried again at the elector's next round; it is never fatal: a
follower that the Service still reaches refuses commands anyway (gateway/admin/api.py).
"""

from __future__ import annotations

import logging

from kubernetes import client

from gateway.kubernetes.api import call_json

log = logging.getLogger(__name__)

ROLE_LABEL = "graystack.dev/role"
LEADER = "leader"
MERGE_PATCH = "application/merge-patch+json"


class RoleLabel:
    def __init__(self, api: client.ApiClient, namespace: str, pod: str) -> None:
        self.namespace = namespace
        self.pod = pod
        self._core = client.CoreV1Api(api)
        self._labelled: bool | None = None  # as last written; None: not known (at start, after a failure)

    def sync(self, leading: bool) -> None:
        """Make the pod's label say `leading`; one patch per change of role (or retry), else nothing."""
        if self._labelled == leading:
            return
        body = {"metadata": {"labels": {ROLE_LABEL: LEADER if leading else None}}}
        try:
            call_json(
                self._core.patch_namespaced_pod, self.pod, self.namespace, body, _content_type=MERGE_PATCH
            )
        except Exception as error:
            self._labelled = None
            change = "add" if leading else "remove"
            log.warning(
                "pod %s: could not %s the leader label (tried again next round): %s", self.pod, change, error
            )
            return
        self._labelled = leading
        log.info("pod %s: leader label %s", self.pod, "added" if leading else "removed")
