"""Snapshot cache: the configuration each Envoy node should have, versioned per type and per resource.

Like go-control-plane's SnapshotCache, a snapshot is a consistent set of resources for one node key.
What this adds: versions are unique to this control-plane process (a restarted server never mistakes
Envoy's last version for its own), a type's version only moves when its content does, and any
change to clusters also moves the endpoints' version, so Envoy gets the CLAs it needs to finish
warming the changed clusters (otherwise it waits 15 s for them). Resources are serialized once per
snapshot and reused by every stream.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.clusters.aggregate.v3 import cluster_pb2 as aggregate_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from google.protobuf import any_pb2
from google.protobuf.message import Message

from gateway.xds import types


class InconsistentSnapshot(ValueError):
    """A snapshot that would leave Envoy with a dangling reference."""


@dataclass(frozen=True)
class TypeResources:
    version: str
    items: Mapping[str, any_pb2.Any]  # name -> packed resource
    hashes: Mapping[str, str]  # name -> hash of the serialized resource (per-resource version, for Delta)

    def select(self, names: Iterable[str] | None) -> list[any_pb2.Any]:
        """The resources a request names (all for a wildcard request), in name order."""
        wanted = sorted(self.items) if names is None else sorted(n for n in names if n in self.items)
        return [self.items[n] for n in wanted]


@dataclass(frozen=True)
class Snapshot:
    resources: Mapping[str, TypeResources]  # type URL -> resources
    created: float = field(default_factory=time.monotonic)

    def version(self, type_url: str) -> str | None:
        entry = self.resources.get(type_url)
        return entry.version if entry else None

    def versions(self) -> dict[str, str]:
        return {types.SHORT_NAME[t]: r.version for t, r in self.resources.items()}


def _pack(messages: Iterable[Message]) -> tuple[dict[str, any_pb2.Any], dict[str, str]]:
    items, hashes = {}, {}
    for message in messages:
        name = types.resource_name(message)
        if name in items:
            raise InconsistentSnapshot(f"two {type(message).__name__} resources named {name!r}")
        packed = any_pb2.Any()
        packed.Pack(message, deterministic=True)
        items[name] = packed
        hashes[name] = hashlib.sha256(packed.value).hexdigest()[:16]
    return items, hashes


def _content_hash(hashes: Mapping[str, str]) -> str:
    return hashlib.sha256(repr(sorted(hashes.items())).encode()).hexdigest()


def check_consistent(resources: Mapping[str, Iterable[Message]]) -> None:
    """Every name a resource refers to must be in the snapshot (go-control-plane's Consistent()).

    Raises InconsistentSnapshot naming the dangling reference.
    """
    clusters = {c.name: c for c in resources.get(types.CLUSTER, [])}
    endpoints = {e.cluster_name for e in resources.get(types.ENDPOINT, [])}
    routes = {r.name: r for r in resources.get(types.ROUTE, [])}
    eds_clusters = set()
    for cluster in clusters.values():
        if cluster.type == cluster_pb2.Cluster.EDS:
            eds_clusters.add(cluster.eds_cluster_config.service_name or cluster.name)
        if cluster.HasField("cluster_type"):
            config = aggregate_pb2.ClusterConfig()
            if cluster.cluster_type.typed_config.Unpack(config):
                _require(set(config.clusters), clusters, f"aggregate cluster {cluster.name!r}")
    _require(eds_clusters, endpoints, "EDS clusters without a load assignment")
    _require(endpoints, eds_clusters, "load assignments for no EDS cluster")
    for route in routes.values():
        _require(_route_clusters(route), clusters, f"route config {route.name!r}")
    for listener in resources.get(types.LISTENER, []):
        _require(_listener_routes(listener), routes, f"listener {listener.name!r}")


def _require(names: set[str], known: Iterable[str], where: str) -> None:
    dangling = sorted(set(names) - set(known))
    if dangling:
        raise InconsistentSnapshot(f"{where}: refers to missing {dangling}")


def _route_clusters(route: route_pb2.RouteConfiguration) -> set[str]:
    names = set()
    for host in route.virtual_hosts:
        for entry in host.routes:
            action = entry.route
            if action.cluster:
                names.add(action.cluster)
            names.update(c.name for c in action.weighted_clusters.clusters)
            names.update(p.cluster for p in action.request_mirror_policies if p.cluster)
            # a mirror named by a header: the clusters the weighted clusters set it to
            keys = {p.cluster_header.lower() for p in action.request_mirror_policies if p.cluster_header}
            names.update(
                added.header.value
                for c in action.weighted_clusters.clusters
                for added in c.request_headers_to_add
                if added.header.key.lower() in keys
            )
    return names


def _listener_routes(listener: listener_pb2.Listener) -> set[str]:
    names = set()
    for chain in listener.filter_chains:
        for network_filter in chain.filters:
            manager = hcm_pb2.HttpConnectionManager()
            if network_filter.typed_config.Unpack(manager) and manager.HasField("rds"):
                names.add(manager.rds.route_config_name)
    return names


class SnapshotCache:
    """Snapshots by node key, and the streams waiting to hear that one changed."""

    def __init__(self, version_prefix: str | None = None) -> None:
        # Unique per process: time plus randomness, so a restart never reuses a version string.
        self.version_prefix = version_prefix or f"{time.time_ns():x}{os.urandom(2).hex()}"
        self._counter = itertools.count(1)
        self._snapshots: dict[str, Snapshot] = {}
        self._listeners: dict[str, set[asyncio.Event]] = {}

    def set_resources(self, key: str, resources: Mapping[str, Iterable[Message]]) -> Snapshot:
        """Make `resources` (type URL -> messages) the configuration for node `key`."""
        return self.set_all({key: resources})[key]

    def set_all(self, by_key: Mapping[str, Mapping[str, Iterable[Message]]]) -> dict[str, Snapshot]:
        """Several nodes' configurations at once: all are checked before any is swapped in.

        Nodes given the same resources object share one check and one serialization, so a fleet
        of identical proxies costs one build, not one per proxy.
        """
        packed_by_id: dict[int, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {}
        for resources in by_key.values():
            if id(resources) in packed_by_id:
                continue
            messages = {type_url: list(items) for type_url, items in resources.items()}
            unknown = set(messages) - set(types.PUSH_ORDER)
            if unknown:
                raise InconsistentSnapshot(f"unsupported resource types {sorted(unknown)}")
            check_consistent(messages)
            packed_by_id[id(resources)] = {t: _pack(messages.get(t, [])) for t in types.PUSH_ORDER}
        return {key: self._swap_in(key, packed_by_id[id(resources)]) for key, resources in by_key.items()}

    def _swap_in(self, key: str, packed: Mapping[str, tuple[dict[str, Any], dict[str, Any]]]) -> Snapshot:
        previous = self._snapshots.get(key)
        built: dict[str, TypeResources] = {}
        clusters_changed = False
        for type_url in types.PUSH_ORDER:
            items, hashes = packed[type_url]
            old = previous.resources.get(type_url) if previous else None
            same = old is not None and _content_hash(old.hashes) == _content_hash(hashes)
            if type_url == types.ENDPOINT and clusters_changed:
                same = False
            if type_url == types.CLUSTER:
                clusters_changed = not same
            version = (
                old.version if same and old is not None else f"{self.version_prefix}-{next(self._counter)}"
            )
            built[type_url] = TypeResources(version=version, items=items, hashes=hashes)
        snapshot = Snapshot(resources=built)
        self._snapshots[key] = snapshot
        for event in self._listeners.get(key, ()):
            event.set()
        return snapshot

    def get(self, key: str) -> Snapshot | None:
        return self._snapshots.get(key)

    def keys(self) -> list[str]:
        return sorted(self._snapshots)

    def subscribe(self, key: str, event: asyncio.Event) -> None:
        self._listeners.setdefault(key, set()).add(event)

    def unsubscribe(self, key: str, event: asyncio.Event) -> None:
        self._listeners.get(key, set()).discard(event)
