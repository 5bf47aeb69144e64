"""What answer capture costs the hop: the same streamed requests through four real Envoys, side by side, one
without `analysis.quality` (no capture code at all), and three capturing 1 %, 10 % and 100 % of answers.

Each Envoy runs the builders' own listener (the request fields' json_to_metadata where capture is on, the
answer filter with or without its capture code, the router) and routes, made static as in
bench/answer_hop.py, whose harness this reuses: one stand-in upstream streaming STREAMED_TOKENS chat chunks,
a receiver for the answer log in a process of its own, requests one at a time in alternating blocks, each
Envoy's CPU read around its own blocks. Every request carries the fields capture reads (temperature,
response_format, tools), so the four differ only in what their configuration keeps.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import tempfile
from pathlib import Path

from bench._common import brief, envoy_binary, write_result
from bench.answer_hop import answers_200, bootstrap, interleaved
from graystack.local.gateway_stack import INFERENCE_PATH, envoy_argv
from graystack.local.processes import free_port, start_process, wait_until

CONFIGS: dict[str, dict | None] = {
    "off": None,
    "1%": {"quality": {"capture_percent": 1}},
    "10%": {"quality": {"capture_percent": 10}},
    "100%": {"quality": {"capture_percent": 100}},
}
BODY = {
    "messages": [{"role": "user", "content": "hello " * 20}],
    "max_tokens": 16,
    "stream": True,
    "temperature": 0,
    "response_format": {"type": "json_object"},
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
}


def request(i: int) -> dict:
    return {"json": BODY}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=4000, help="requests per Envoy")
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    receiver_port, upstream = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="bench-capture-hop-") as workdir:
        logs = Path(workdir)
        processes = []
        try:
            standin = [sys.executable, "-m", "graystack.local.standin", "--name", "baseline"]
            processes.append(start_process("standin", [*standin, "--port", str(upstream)], logs))
            receive = [sys.executable, "-m", "bench.answer_hop", "--receive", str(receiver_port)]
            receiver = start_process("receiver", [*receive, "--out", str(logs / "heard.json")], logs)
            processes.append(receiver)
            wait_until(functools.partial(answers_200, f"http://127.0.0.1:{upstream}/readyz"), 30, "stand-in")
            urls, pids = {}, {}
            for name, analysis in CONFIGS.items():
                listen, admin = free_port(), free_port()
                path = logs / f"envoy-{name.rstrip('%')}.yaml"
                path.write_text(bootstrap(listen, admin, upstream, receiver_port, True, analysis=analysis))
                envoy = start_process(f"envoy-{name.rstrip('%')}", envoy_argv(envoy_binary(), path), logs)
                processes.append(envoy)
                ready = functools.partial(answers_200, f"http://127.0.0.1:{admin}/ready")
                wait_until(ready, 30, f"Envoy {name}")
                urls[name], pids[name] = f"http://127.0.0.1:{listen}", envoy.pid
            results = interleaved(urls, pids, request, args.n, args.block, args.warmup, reference="off")
            receiver.popen.send_signal(signal.SIGTERM)
        finally:
            for process in processes:
                process.stop()
    for name in CONFIGS:
        print(
            f"{name:5s}: {brief(results[name]['latency_ms'])}  Envoy CPU {results[name]['envoy_cpu_s_per_1000']} s/1000"
        )
    print(f"added over capture off: {results['added_ms']}")
    path = write_result(
        "capture_hop",
        {
            "requests_per_envoy": args.n,
            "block": args.block,
            "warmup": args.warmup,
            "path": INFERENCE_PATH,
            "configs": CONFIGS,
            "body": BODY,
            "envoy_concurrency": 2,
        },
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
