"""A stand-in for the Kubernetes API server, for testing Kubernetes mode with the official client.

No real API server can run here (no kind, k3s or envtest binaries, no Docker), so this speaks the part of
its HTTP/JSON protocol the gateway uses, on 127.0.0.1: namespaced get, list (fieldSelector
`metadata.name=`, labelSelector `key` / `key=value`), create (with generateName), replace with
optimistic concurrency (a stale resourceVersion is 409 Conflict), a JSON merge patch (RFC 7386; a
strategic merge patch is taken as one: the same for plain maps such as labels), delete, and watch:
`?watch=true` streams one JSON event per line (ADDED / MODIFIED / DELETED) after the requested
resourceVersion, until `timeoutSeconds`. Deployments have their `scale` subresource (GET and merge PATCH of
an autoscaling/v1 Scale whose spec.replicas is the Deployment's and whose status.replicas is its status';
no controller runs, so tests say when pods are ready: `pods_ready`). Like the real server, a watch from a version older than the
compaction point gets a 200 and a single ERROR event whose Status has code 410 (reason Expired). Tests
change objects as kubectl would (`put`, `delete`), break every open watch mid-stream (`break_watches`),
and compact history (`compact`). Every request is logged, with what the server answered, for tests to
inspect. Custom resources (HTTPRoute) are validated against their vendored CRDs, count their generation
and keep a status subresource, as with the CRDs installed (tests/support/kube_crds.py).
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import yaml

from graystack.local.processes import free_port
from tests.support.kube_crds import CUSTOM, defaulted, problems, stored
from tests.support.kube_objects import matches, merge_patch, scale_of, status_body

KINDS = {  # kind -> (API prefix, resource)
    "ConfigMap": ("/api/v1", "configmaps"),
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "Event": ("/api/v1", "events"),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices"),
    "Lease": ("/apis/coordination.k8s.io/v1", "leases"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "HorizontalPodAutoscaler": ("/apis/autoscaling/v2", "horizontalpodautoscalers"),
    **{kind: (prefix, resource) for kind, (prefix, resource, _) in CUSTOM.items()},
}
RESOURCES = {resource: kind for kind, (_, resource) in KINDS.items()}
MERGE_PATCHES = ("application/merge-patch+json", "application/strategic-merge-patch+json")
PATH = re.compile(
    r"^(/api/v1|/apis/[^/]+/[^/]+)/namespaces/([^/]+)/([^/]+)(?:/([^/]+)(?:/(scale|status))?)?$"
)


@dataclass(frozen=True)
class Logged:
    method: str
    path: str
    query: dict[str, str]
    status: int
    note: str = ""  # "watch", "410", "broken"


class FakeApiServer:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log: list[Logged] = []
        self._changed = threading.Condition()
        self._store: dict[tuple[str, str], dict[str, dict]] = {}  # (resource, namespace) -> name -> obj
        self._history: list[tuple[int, str, str, dict]] = []  # (version, resource, event type, obj)
        self._version = 1000
        self._compacted = 0
        self._breaks = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._server.handle_error = lambda *_: None  # a cut watch connection is the point, not an error
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._changed:
            self._breaks += 1
            self._changed.notify_all()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "tester", "user": {"token": "not-checked"}}],
            "contexts": [
                {"name": "double", "context": {"cluster": "double", "user": "tester", "namespace": namespace}}
            ],
            "current-context": "double",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- what tests do, as kubectl would ------------------------------------------------------------

    def put(self, obj: dict, status: bool = False) -> dict:
        """Create or replace `obj` (apiVersion, kind, metadata.name/namespace), whatever its version;
        `status`: only its status, as a controller writes the status subresource."""
        _, resource = KINDS[obj["kind"]]
        obj = defaulted(obj["kind"], obj)
        if (invalid := problems(obj["kind"], obj)) is not None:
            raise ValueError(invalid)
        meta = obj["metadata"]
        with self._changed:
            current = self._store.get((resource, meta["namespace"]), {}).get(meta["name"])
            return self._write(resource, stored(obj["kind"], copy.deepcopy(obj), current, status), current)

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        with self._changed:
            found = self._store.get((KINDS[kind][1], namespace), {}).get(name)
            return copy.deepcopy(found)

    def list(self, kind: str, namespace: str) -> list[dict]:
        with self._changed:
            return copy.deepcopy(list(self._store.get((KINDS[kind][1], namespace), {}).values()))

    def delete(self, kind: str, namespace: str, name: str) -> None:
        resource = KINDS[kind][1]
        with self._changed:
            obj = self._store.get((resource, namespace), {}).pop(name)
            self._record(resource, "DELETED", obj)

    def pods_ready(self, namespace: str, deployment: str, ready: int) -> None:
        """`ready` of the Deployment's pods are up and ready (what its controller and the kubelets report)."""
        with self._changed:
            current = self._store[("deployments", namespace)][deployment]
            status = {"replicas": current["spec"].get("replicas", 1), "readyReplicas": ready}
            self._write("deployments", {**copy.deepcopy(current), "status": status}, current)

    def break_watches(self) -> None:
        """Every open watch stops mid-stream, its connection cut (a restarted API server, a dropped LB)."""
        with self._changed:
            self._breaks += 1
            self._changed.notify_all()

    def compact(self) -> None:
        """Forget history up to now, as etcd does after writes elsewhere moved the revision on: a watch
        from any version handed out so far gets 410 Gone; a fresh list gets a version that works."""
        with self._changed:
            self._version += 1
            self._compacted = self._version

    def answered(self, note: str) -> list[Logged]:
        return [entry for entry in list(self.log) if entry.note == note]

    # -- the store ----------------------------------------------------------------------------------

    def _write(self, resource: str, obj: dict, current: dict | None) -> dict:
        """Store `obj` (the caller holds the lock): a new version, uid and timestamp kept from before."""
        self._version += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self._version)
        meta["uid"] = current["metadata"]["uid"] if current else str(uuid.uuid4())
        meta["creationTimestamp"] = (
            current["metadata"]["creationTimestamp"] if current else time.strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        self._store.setdefault((resource, meta["namespace"]), {})[meta["name"]] = obj
        self._record(resource, "MODIFIED" if current else "ADDED", obj)
        return copy.deepcopy(obj)

    def _record(self, resource: str, kind: str, obj: dict) -> None:
        if kind == "DELETED":
            self._version += 1
            obj = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(self._version)}}
        self._history.append((self._version, resource, kind, copy.deepcopy(obj)))
        self._changed.notify_all()

    # -- HTTP ---------------------------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # a watch streams in chunks, as the real server's does

            def log_message(self, *args) -> None:  # the test log has it
                pass

            def do_GET(self) -> None:
                server._serve(self, "GET")

            def do_POST(self) -> None:
                server._serve(self, "POST")

            def do_PUT(self) -> None:
                server._serve(self, "PUT")

            def do_PATCH(self) -> None:
                server._serve(self, "PATCH")

            def do_DELETE(self) -> None:
                server._serve(self, "DELETE")

        return Handler

    def _serve(self, request: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(request.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        found = PATH.match(url.path)
        if found is None or found.group(3) not in RESOURCES:
            return self._reply(request, method, url.path, query, 404, status_body(404, "NotFound", url.path))
        _, namespace, resource, name, subresource = found.groups()
        length = int(request.headers.get("Content-Length") or 0)
        body = json.loads(request.rfile.read(length)) if length else None
        if method == "GET" and name is None and query.get("watch") in ("true", "1"):
            return self._watch(request, url.path, query, resource, namespace)
        patch_type = request.headers.get("Content-Type")
        if method == "PATCH" and patch_type not in MERGE_PATCHES:
            answer = status_body(415, "UnsupportedMediaType", f"the double does not serve {patch_type}")
            return self._reply(request, method, url.path, query, 415, answer)
        kind = RESOURCES[resource]
        body = defaulted(kind, body) if method in ("POST", "PUT") and body is not None else body
        invalid = problems(kind, body) if method in ("POST", "PUT") and body is not None else None
        if invalid is not None:
            answer = status_body(422, "Invalid", f'{kind} "{name or ""}" is invalid: {invalid}')
            return self._reply(request, method, url.path, query, 422, answer)
        with self._changed:
            if subresource == "scale":
                code, answer = self._scale(method, resource, namespace, name, body)
            else:
                code, answer = self._act(
                    method, resource, namespace, name, query, body, subresource == "status"
                )
        return self._reply(request, method, url.path, query, code, answer)

    def _act(
        self,
        method: str,
        resource: str,
        namespace: str,
        name: str | None,
        query: dict,
        body: dict | None,
        status_only: bool = False,
    ) -> tuple[int, dict]:
        objects = self._store.get((resource, namespace), {})
        kind = RESOURCES[resource]
        if method == "GET" and name is None:
            items = [copy.deepcopy(o) for o in objects.values() if matches(o, query)]
            return 200, {
                "kind": f"{kind}List",
                "apiVersion": "v1",
                "metadata": {"resourceVersion": str(self._version)},
                "items": items,
            }
        if method == "POST" and name is None:
            meta = body.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            meta["namespace"] = namespace
            if meta["name"] in objects:
                return 409, status_body(409, "AlreadyExists", f'{resource} "{meta["name"]}" already exists')
            body.setdefault("kind", kind)
            return 201, self._write(resource, stored(kind, body, None, False), None)
        current = objects.get(name)
        if current is None:
            return 404, status_body(404, "NotFound", f'{resource} "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(current)
        if method == "DELETE":
            self.delete(kind, namespace, name)
            return 200, status_body(200, "", "deleted") | {"status": "Success"}
        if method == "PATCH":
            patched = merge_patch(copy.deepcopy(current), body)
            patched["metadata"].update(name=name, namespace=namespace)
            return 200, self._write(resource, patched, current)
        sent = body["metadata"].get("resourceVersion")
        if sent and sent != current["metadata"]["resourceVersion"]:
            message = f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified'
            return 409, status_body(409, "Conflict", message)
        body["metadata"]["namespace"] = namespace
        body.setdefault("kind", kind)
        return 200, self._write(resource, stored(kind, body, current, status_only), current)

    def _scale(
        self, method: str, resource: str, namespace: str, name: str, body: dict | None
    ) -> tuple[int, dict]:
        """GET or merge-PATCH a Deployment's scale: a patched spec.replicas lands in the Deployment."""
        current = self._store.get((resource, namespace), {}).get(name)
        if resource != "deployments" or current is None or method not in ("GET", "PATCH"):
            return 404, status_body(404, "NotFound", f'{resource} "{name}" not found')
        if method == "GET":
            return 200, scale_of(current)
        replicas = merge_patch(scale_of(current), body)["spec"]["replicas"]
        deployment = copy.deepcopy(current)
        deployment["spec"]["replicas"] = replicas
        return 200, scale_of(self._write(resource, deployment, current))

    def _reply(
        self,
        request: BaseHTTPRequestHandler,
        method: str,
        path: str,
        query: dict,
        code: int,
        answer: dict,
    ) -> None:
        data = json.dumps(answer).encode()
        request.send_response(code)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)
        self.log.append(Logged(method, path, query, code))

    def _watch(
        self, request: BaseHTTPRequestHandler, path: str, query: dict, resource: str, namespace: str
    ) -> None:
        since = int(query.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 60)
        request.send_response(200)
        request.send_header("Content-Type", "application/json")
        request.send_header("Transfer-Encoding", "chunked")
        request.send_header("Connection", "close")
        request.end_headers()
        request.close_connection = True
        with self._changed:
            breaks, gone = self._breaks, since < self._compacted
        if gone:
            error = status_body(410, "Expired", f"too old resource version: {since} ({self._compacted})")
            self._send_line(request, {"type": "ERROR", "object": error})
            self._end_stream(request)
            self.log.append(Logged("GET", path, query, 200, "410"))
            return
        self.log.append(Logged("GET", path, query, 200, "watch"))
        while True:
            with self._changed:
                events = [
                    (version, kind, obj)
                    for version, res, kind, obj in self._history
                    if version > since and res == resource and obj["metadata"]["namespace"] == namespace
                ]
                if not events and self._breaks == breaks:
                    self._changed.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                broken = self._breaks != breaks
            if broken:
                self.log.append(Logged("GET", path, query, 200, "broken"))
                request.connection.shutdown(socket.SHUT_RDWR)  # mid-stream, no clean end
                return
            for version, kind, obj in events:
                since = version
                if matches(obj, query):
                    self._send_line(request, {"type": kind, "object": obj})
            if time.monotonic() >= deadline:
                self._end_stream(request)
                return

    @staticmethod
    def _send_line(request: BaseHTTPRequestHandler, event: dict) -> None:
        line = json.dumps(event).encode() + b"\n"
        request.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        request.wfile.flush()

    @staticmethod
    def _end_stream(request: BaseHTTPRequestHandler) -> None:
        request.wfile.write(b"0\r\n\r\n")
        request.wfile.flush()
