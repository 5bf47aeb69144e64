"""What sticky cohorts cost the hop: the same requests through three real Envoys, side by side, one with no
cohorts (a random 50/50 split), one keyed on a header (`routing.affinity: [{header: x-user-id}]`) and one
on a JSON body field (`[{body: user}]`, read by json_to_metadata before the route is chosen).

Each Envoy runs the builders' own listener (the affinity filters, the answer filter, the router) and
routes, made static as in bench/answer_hop.py, whose harness this reuses: one stand-in upstream behind both
variants' clusters, a receiver for the answer log in a process of its own, requests one at a time in
alternating blocks, each Envoy's CPU read around its own blocks. Every request carries both the header and
the body field (500 distinct clients), so the three differ only in what their configuration reads.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from bench._common import brief, write_result
from bench.answer_hop import bootstrap, side_by_side
from graystack.local.gateway_stack import INFERENCE_PATH

CLIENTS = 500
SPLIT = {"weights": {"baseline": 50, "candidate": 50}}
CONFIGS: dict[str, dict[str, Any]] = {
    "none": SPLIT,
    "header": {**SPLIT, "affinity": [{"header": "x-user-id"}]},
    "body": {**SPLIT, "affinity": [{"body": "user"}]},
}


def request(i: int) -> dict[str, Any]:
    client = f"user-{i % CLIENTS}"
    body = {"user": client, "messages": [{"role": "user", "content": "hello " * 20}], "max_tokens": 16}
    return {"json": body, "headers": {"x-user-id": client}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=3000, help="requests per Envoy")
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=200)
    args = parser.parse_args()
    bootstraps = {
        name: functools.partial(bootstrap, measure=True, routing=routing) for name, routing in CONFIGS.items()
    }
    results = side_by_side("cohort-hop", bootstraps, request, args, reference="none")
    for name in CONFIGS:
        print(
            f"{name:6s}: {brief(results[name]['latency_ms'])}  Envoy CPU {results[name]['envoy_cpu_s_per_1000']} s/1000"
        )
    print(f"added over no cohorts: {results['added_ms']}")
    path = write_result(
        "cohort_hop",
        {
            "requests_per_envoy": args.n,
            "block": args.block,
            "warmup": args.warmup,
            "clients": CLIENTS,
            "path": INFERENCE_PATH,
            "configs": CONFIGS,
            "envoy_concurrency": 2,
        },
        results,
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
