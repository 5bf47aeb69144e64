"""The rollout state in the cluster: a ConfigMap whose `state.json` holds exactly what the file store
writes (gateway/rollout/state_store.py: {"version": 1, "state": {...}}).

The controller keeps writing its local state file (atomically, as in local mode); the cluster copy
follows it. The leader pushes each new version of the file to the ConfigMap (optimistic concurrency:
every write carries the resourceVersion it read); the other replicas take each new version from the
ConfigMap into their file and restore from it, so their Envoys get the leader's split; a new leader
first pulls the latest version, so it resumes the stage (and the hold accrued) where the old one left.
The push follows the file within `poll` seconds: a leader killed in that gap loses at most its last step.
"""

from __future__ import annotations

import json
import logging

from kubernetes import client

from gateway.kubernetes.api import call_json, status_of
from gateway.rollout.machine import RolloutState
from gateway.rollout.state_store import FORMAT_VERSION

log = logging.getLogger(__name__)

STATE_KEY = "state.json"


def decode_state(text: str) -> RolloutState:
    """ValueError (with the reason) unless `text` is a state the file store would read back."""
    try:
        data = json.loads(text)
        if data.get("version") != FORMAT_VERSION:
            raise ValueError(f"format version {data.get('version')!r}, expected {FORMAT_VERSION}")
        return RolloutState.from_dict(data["state"])
    except (KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"not a rollout state: {error!r}") from None


def state_text(obj: dict | None) -> str | None:
    return ((obj or {}).get("data") or {}).get(STATE_KEY)


class ClusterState:
    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        self._core = client.CoreV1Api(api)

    def read(self) -> str | None:
        """The stored state's text; None if there is none yet."""
        try:
            return state_text(call_json(self._core.read_namespaced_config_map, self.name, self.namespace))
        except Exception as error:
            if status_of(error) == 404:
                return None
            raise

    def write(self, text: str, attempts: int = 3) -> None:
        """Replace `state.json`, read-modify-write on the resourceVersion; creates the ConfigMap if absent."""
        for _ in range(attempts):
            try:
                current = call_json(self._core.read_namespaced_config_map, self.name, self.namespace)
            except Exception as error:
                if status_of(error) != 404:
                    raise
                body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": self.name}}
                body["data"] = {STATE_KEY: text}
                write, args = self._core.create_namespaced_config_map, (self.namespace, body)
            else:
                current["data"] = {**(current.get("data") or {}), STATE_KEY: text}
                write, args = self._core.replace_namespaced_config_map, (self.name, self.namespace, current)
            try:
                call_json(write, *args)
                return
            except Exception as error:
                if status_of(error) != 409:
                    raise
                log.info("state ConfigMap %s changed under us, writing again", self.name)
        raise RuntimeError(f"state ConfigMap {self.name}: {attempts} conflicting writes in a row")
