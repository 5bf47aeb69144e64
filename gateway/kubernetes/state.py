"""The rollout state in the cluster: a ConfigMap whose `state.json` holds exactly what the file store
writes (gateway/rollout/state_store.py: {"version": 2, "state": {...}}), so a rollout moves between
modes by a copy.

It is the controller's `StateStore` in Kubernetes mode. The leader saves every new state straight into
the ConfigMap as the step happens (no local file, nothing in between), so a new leader, which loads it
on taking the Lease, resumes the stage (and the hold accrued) where the old one stopped. Only the
leader writes: on the other replicas `save` does nothing; they take the leader's state from their watch
of the ConfigMap. A write is a read-modify-write that carries the resourceVersion it read (optimistic
concurrency: 409 Conflict, read again and redo), so a concurrent edit of the ConfigMap's other keys or
metadata is never lost.
A `state.json` that is not a state is reported as none (the rollout starts from its first stage, as
for a corrupt file) and kept under `state.json.corrupt` by the write that replaces it. With several
candidates, each one's lane keeps its state under a key of its own in the same ConfigMap
(`state.<rollout>-<candidate>.json`, `lane_key`), so the chart's RBAC, which names the one ConfigMap, holds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client

from gateway.kubernetes.api import call_json, status_of
from gateway.kubernetes.spec_source import origin
from gateway.rollout.rollout_state import RolloutState
from gateway.rollout.state_store import decode_state, encode_state

log = logging.getLogger(__name__)

STATE_KEY = "state.json"


def lane_key(lane: str) -> str:
    """The key a candidate's lane (gateway/rollout/lanes.py) keeps its state under."""
    return f"state.{lane}.json"


def state_text(obj: dict[str, Any] | None, key: str = STATE_KEY) -> str | None:
    return ((obj or {}).get("data") or {}).get(key)


def readable(text: str) -> bool:
    try:
        decode_state(text)
    except ValueError:
        return False
    return True


class ConfigMapStateStore:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        leading: Callable[[], bool] = lambda: True,
        key: str = STATE_KEY,
    ) -> None:
        """`leading()`: whether this replica may write now (asked at every save); `key`: the data key the
        state is kept under."""
        self.namespace = namespace
        self.name = name
        self.key = key
        self.where = origin(namespace, name) + ("" if key == STATE_KEY else f" ({key})")
        self._leading = leading
        self._core = client.CoreV1Api(api)

    def load(self) -> RolloutState | None:
        """The stored state; None if there is none yet or it is unreadable (with a warning). Raises if
        the API server cannot be asked: a caller that needs the state must not guess it."""
        text = self.read()
        if not text:
            return None
        try:
            return decode_state(text)
        except ValueError as error:
            log.warning("rollout state in %s is unreadable (%s); starting afresh", self.where, error)
            return None

    def save(self, state: RolloutState) -> None:
        if not self._leading():
            log.debug("not leading: the rollout state is the leader's to store")
            return
        self.write(encode_state(state))

    def read(self) -> str | None:
        """The stored state's text; None if there is none yet."""
        try:
            return state_text(
                call_json(self._core.read_namespaced_config_map, self.name, self.namespace), self.key
            )
        except Exception as error:
            if status_of(error) == 404:
                return None
            raise

    def write(self, text: str, attempts: int = 3) -> None:
        """Replace the state's key, read-modify-write on the resourceVersion; creates the ConfigMap if absent."""
        write: Callable[..., Any]
        args: tuple[Any, ...]
        for _ in range(attempts):
            try:
                current = call_json(self._core.read_namespaced_config_map, self.name, self.namespace)
            except Exception as error:
                if status_of(error) != 404:
                    raise
                body: dict[str, Any] = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": self.name},
                }
                body["data"] = {self.key: text}
                write, args = self._core.create_namespaced_config_map, (self.namespace, body)
            else:
                data = dict(current.get("data") or {})
                if data.get(self.key) and not readable(data[self.key]):
                    data[f"{self.key}.corrupt"] = data[self.key]
                current["data"] = {**data, self.key: text}
                write, args = self._core.replace_namespaced_config_map, (self.name, self.namespace, current)
            try:
                call_json(write, *args)
                return
            except Exception as error:
                if status_of(error) != 409:
                    raise
                log.info("state ConfigMap %s changed under us, writing again", self.name)
        raise RuntimeError(f"state ConfigMap {self.name}: {attempts} conflicting writes in a row")
