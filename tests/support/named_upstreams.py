"""Small HTTP servers, each on a loopback address of its own (127.0.0.2, 127.0.0.3, ...: Linux answers on
all of 127/8), that answer every request with their name and count what they got. Behind a gateway that
attributes answers by the address that served them, each stands for one pod."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME_HEADER = "x-upstream"
MODEL_HEADER = "x-upstream-model"  # the `model` of the JSON body it got ("" for none), answered back
METRICS_PATH = "/metrics"  # its request counter, as a model server exports one (not counted itself)
COUNTER = "upstream_requests"
POLL = 0.05  # seconds between the server's looks for a stop: the most a test waits on `stop()`


class _QuietServer(ThreadingHTTPServer):
    """A client that hung up mid-answer (traffic stopped) is no error of the server's."""

    def handle_error(self, request: object, client_address: object) -> None:
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class NamedUpstream:
    """`name` answered (200, text) on `host:port`; `hits`: the requests it got, mirrored copies included,
    also served as a Prometheus counter at METRICS_PATH.
    `status`: what it answers (a test sets 500 to fail it, as a broken model server would);
    `failing_models`: the `model` names it answers 500 for whatever `status` says (a broken adapter or
    model on pods whose other models still serve).
    `metrics`: more Prometheus text served after the counter (a test sets a model server's gauges, such
    as vLLM's queue and KV-cache use); `metrics_delay`: seconds its metrics wait before answering (a
    test sets it to make them hang). `last_body`: the body of the last request it got (a chunked body
    read whole). `stream`: when a test sets an event, each answer is streamed as a model server streams
    tokens, its first chunk at once and its last once the event is set; `kill()` ends the pod mid-answer."""

    def __init__(self, name: str, host: str, port: int) -> None:
        self.name, self.host, self.port = name, host, port
        self.hits = 0
        self.status = 200
        self.failing_models: set[str] = set()
        self.metrics = ""
        self.metrics_delay = 0.0
        self.last_body = b""
        self.stream: threading.Event | None = None
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._server = _QuietServer((host, port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL,), name=f"upstream-{name}", daemon=True
        )

    def start(self) -> NamedUpstream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def kill(self) -> None:
        """The pod gone, as when its process is killed: no more connections taken, and each one it holds
        (an answer mid-stream) closed at once."""
        self.stop()
        with self._lock:
            held = list(self._open)
        for connection in held:
            connection.shutdown(socket.SHUT_RDWR)
        if self.stream is not None:
            self.stream.set()  # its handlers wake, find the connection gone, and end

    def _count(self) -> None:
        with self._lock:
            self.hits += 1

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        upstream = self
        body = upstream.name.encode()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: Envoy pools its connections
            disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed ACK

            def log_message(self, *args: object) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                with upstream._lock:
                    upstream._open.add(self.connection)

            def finish(self) -> None:
                with upstream._lock:
                    upstream._open.discard(self.connection)
                super().finish()

            def _body(self) -> bytes:
                if "chunked" not in (self.headers.get("Transfer-Encoding") or "").lower():
                    return self.rfile.read(int(self.headers.get("Content-Length") or 0))
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers, then the blank line
                return b"".join(chunks)

            def _answer(self) -> None:
                received = self._body()
                if self.path == METRICS_PATH:
                    time.sleep(upstream.metrics_delay)
                    counter = f"# TYPE {COUNTER} counter\n{COUNTER}_total {upstream.hits}\n"
                    self._send(200, (counter + upstream.metrics).encode())
                    return
                upstream._count()
                upstream.last_body = received
                model = _model(received)
                status = 500 if model in upstream.failing_models else upstream.status
                if upstream.stream is not None and status == 200:
                    self._stream(upstream.stream)
                    return
                self._send(status, body, model)

            def _stream(self, rest: threading.Event) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header(NAME_HEADER, upstream.name)
                self.end_headers()
                for chunk in (f"data: {upstream.name}\n\n".encode(), b"data: [DONE]\n\n", b""):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    rest.wait(10)

            def _send(self, status: int, content: bytes, model: str = "") -> None:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(content)))
                self.send_header(NAME_HEADER, upstream.name)
                self.send_header(MODEL_HEADER, model)
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = _answer

        return Handler


def _model(body: bytes) -> str:
    """The JSON body's `model`, or "" where it has none."""
    try:
        document = json.loads(body)
    except ValueError:
        return ""
    model = document.get("model") if isinstance(document, dict) else None
    return model if isinstance(model, str) else ""


def serving(hosts: Mapping[str, str], port: int) -> Iterator[dict[str, NamedUpstream]]:
    """A pod per name, on its own address at `port`, by name; all stopped after (a fixture's body:
    `yield from serving(...)`)."""
    upstreams = {name: NamedUpstream(name, host, port).start() for name, host in hosts.items()}
    try:
        yield upstreams
    finally:
        for upstream in upstreams.values():
            upstream.stop()
