"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Every gateway replica serves xDS; the one holding the Lease also drives the rollout (analysis, steps,
state writes). The holder renews `spec.renewTime` every `retry` seconds. Another replica takes the Lease
over when the record has not changed for `lease_seconds` as *it* observed it (its own monotonic clock,
so clock skew between nodes does not matter). Every write carries the resourceVersion it read, so of two
replicas racing for an expired Lease the API server lets exactly one win (409 Conflict for the other).
A leader that cannot renew for `renew_deadline` seconds steps down before another can take over.
A leader that stops cleanly releases the Lease (empty holder), so a successor needs no wait.
`holder` is who held the Lease at the last round, as this replica saw it (the admin API names it).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client

from gateway.kubernetes.api import call_json, status_of

log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float = 15.0,
        each_round: Callable[[bool], None] = lambda leading: None,
    ) -> None:
        """`on_change(leading)`, given to `start`, is called on the elector's thread (and at stop)
        whenever leadership is won or lost; `each_round(leading)` after every round and at a clean stop,
        for work that must follow leadership and be tried again until it succeeds (the leader label on
        the pod)."""
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.retry = lease_seconds / 5
        self.renew_deadline = lease_seconds * 2 / 3
        self.leading = False
        self.holder = ""  # the Lease's holder at the last round; "" for none (or not read yet)
        self._leases = client.CoordinationV1Api(api)
        self._on_change: Callable[[bool], None] = lambda leading: None
        self._each_round = each_round
        self._observed: tuple[str, float] | None = None  # (resourceVersion, when first seen)
        self._renewed_at = 0.0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, on_change: Callable[[bool], None]) -> None:
        self._on_change = on_change
        self._thread = threading.Thread(target=self._run, name=f"lease {self.name}", daemon=True)
        self._thread.start()

    def stop(self, release: bool = True, timeout: float = 5.0) -> None:
        """Stop campaigning; `release`: hand the Lease back now and end `each_round`'s work (False: leave
        both as a crash would, the Lease to expire). Once stopped, a second stop does nothing."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if release and self.leading:
            self._release()
        self._set_leading(False)
        if release:
            self._each_round(False)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._set_leading(self.try_acquire_or_renew())
            except Exception as error:  # the API server is unreachable: keep what we had, for a while
                log.warning("lease %s: %s", self.name, error)
                if self.leading and time.monotonic() - self._renewed_at > self.renew_deadline:
                    log.error(
                        "lease %s: not renewed for %.0fs, stepping down", self.name, self.renew_deadline
                    )
                    self._set_leading(False)
            self._each_round(self.leading)
            self._stopping.wait(self.retry)

    def try_acquire_or_renew(self) -> bool:
        """One round: True if this replica holds the Lease after it."""
        try:
            lease = call_json(self._leases.read_namespaced_lease, self.name, self.namespace)
        except Exception as error:
            if status_of(error) != 404:
                raise
            return self._write(None)
        spec = lease.get("spec") or {}
        holder = self.holder = spec.get("holderIdentity") or ""
        version = lease["metadata"]["resourceVersion"]
        if self._observed is None or self._observed[0] != version:
            self._observed = (version, time.monotonic())
        if holder == self.identity:
            return self._write(lease)
        duration = spec.get("leaseDurationSeconds") or self.lease_seconds
        if holder and time.monotonic() - self._observed[1] < duration:
            return False  # held, and renewed recently enough as far as we saw
        return self._write(lease)

    def _write(self, lease: dict[str, Any] | None) -> bool:
        now = _now()
        spec = (lease or {}).get("spec") or {}
        taking_over = spec.get("holderIdentity") != self.identity
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_seconds),
                "acquireTime": now if taking_over else spec.get("acquireTime", now),
                "renewTime": now,
                "leaseTransitions": spec.get("leaseTransitions", 0) + (1 if taking_over and lease else 0),
            },
        }
        try:
            if lease is None:
                call_json(self._leases.create_namespaced_lease, self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                call_json(self._leases.replace_namespaced_lease, self.name, self.namespace, body)
        except Exception as error:
            if status_of(error) == 409:  # another replica wrote first
                return False
            raise
        self._renewed_at = time.monotonic()
        self.holder = self.identity
        return True

    def _release(self) -> None:
        try:
            lease = call_json(self._leases.read_namespaced_lease, self.name, self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"].update(holderIdentity="", leaseDurationSeconds=1, renewTime=_now())
                call_json(self._leases.replace_namespaced_lease, self.name, self.namespace, lease)
                self.holder = ""
        except Exception as error:
            log.warning("lease %s: could not release: %s", self.name, error)

    def _set_leading(self, leading: bool) -> None:
        if leading != self.leading:
            self.leading = leading
            log.info("lease %s: %s %s", self.name, self.identity, "leads" if leading else "follows")
            self._on_change(leading)
