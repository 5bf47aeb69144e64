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
from typing import Any

from bench._common import brief, write_result
from bench.answer_hop import bootstrap, side_by_side
from graystack.local.gateway_stack import INFERENCE_PATH

CONFIGS: dict[str, dict[str, Any] | None] = {
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


def request(i: int) -> dict[str, Any]:
    return {"json": BODY}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=4000, help="requests per Envoy")
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=100)
    args = parser.parse_args()
    bootstraps = {
        name: functools.partial(bootstrap, measure=True, analysis=analysis)
        for name, analysis in CONFIGS.items()
    }
    results = side_by_side("capture-hop", bootstraps, request, args, reference="off")
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
