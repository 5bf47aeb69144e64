"""Rollback time with no notification receiver, a healthy one and a blackholed one, side by side.

bench/rollback_time.py's measurement (fault onset to every Envoy's ACK of the rollback, through the real
model servers, gateway and Envoy on loopback), on one stack whose spec file is rewritten between runs
to name no receiver, a healthy receiver (an HTTP server in this process answering 204, signed with a
secret file) or a blackholed one (a loopback socket that takes connections and never answers): the
receivers take turns run by run, so load on the machine falls on all three alike. The gateway sends
every event to the receiver (the rollback, its ACK, the retry's step, any hold); a blackholed
receiver's messages wait out their 5 s attempts in its queue meanwhile.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench._common import envoy_binary, summarize, write_result
from bench.rollback_time import one_run, rollout
from graystack.local.processes import wait_until
from graystack.local.rollout_stack import RolloutStack, Traffic
from tests.support.webhook_receiver import Recorder, blackhole, recording

RECEIVERS = ("none", "healthy", "blackholed")


@contextmanager
def receivers() -> Iterator[tuple[Recorder, dict[str, int]]]:
    """A healthy receiver (answering 204) and a blackholed one on loopback ports, stopped after the block."""
    with recording(status=204) as (healthy, healthy_port), blackhole() as hole_port:
        yield healthy, {"healthy": healthy_port, "blackholed": hole_port}


def use_receiver(stack: RolloutStack, which: str, ports: dict[str, int], secret: Path) -> None:
    """Rewrite the spec to name `which` receiver, and wait until the gateway took it."""
    spec = stack.spec
    spec.pop("notifications", None)
    if which != "none":
        spec["notifications"] = [{"url": f"http://127.0.0.1:{ports[which]}/hook", "secret_file": str(secret)}]
    if spec == stack.spec:
        return
    before = stack.status()["spec"]["sha256"]
    stack.write_spec(spec)
    wait_until(
        lambda: (s := stack.status()["spec"])["sha256"] != before and s["last_error"] is None,
        15,
        f"the spec naming the {which} receiver",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="fault-and-rollback cycles per receiver")
    parser.add_argument("--rate", type=float, default=40.0, help="client requests per second, in all")
    parser.add_argument("--error-rate", type=float, default=0.3, help="zero-layer's injected error rate")
    args = parser.parse_args()
    envoy = envoy_binary()
    runs: dict[str, list[dict[str, Any]]] = {which: [] for which in RECEIVERS}
    with tempfile.TemporaryDirectory(prefix="notify-rollback-") as workdir, receivers() as (healthy, ports):
        secret = Path(workdir) / "hook-secret"
        secret.write_text("bench-secret\n")
        stack = RolloutStack(Path(workdir), envoy, rollout(20))
        try:
            stack.start()
            with Traffic(stack.client.base_url, args.rate) as traffic:
                for i in range(args.runs):
                    for which in RECEIVERS:
                        use_receiver(stack, which, ports, secret)
                        run = one_run(stack, traffic, args.error_rate)
                        runs[which].append(run)
                        print(f"run {i + 1}, {which}: onset -> ACK {run['onset_to_ack_s']} s")
            # The blackholed receiver (the last one named) shows its failures once its first message
            # has used up every attempt.
            status = wait_until(
                lambda: (n := stack.status()["notifications"])["receivers"][0]["failed"] and n,
                60,
                "the blackholed receiver's first failure",
            )
        finally:
            stack.stop()
    # A run whose rollback came before its fault was rolled back by the previous fault's last errors,
    # counted by the tests that `retry` started (bench.rollback_time's cycle): kept, left out of the stats.
    valid = {which: [run for run in runs[which] if run["onset_to_decision_s"] >= 0] for which in RECEIVERS}
    results: dict[str, Any] = {
        which: {
            key: summarize([run[key] for run in valid[which]])
            for key in ("onset_to_ack_s", "onset_to_decision_s", "decision_to_ack_s")
        }
        | {"runs": runs[which], "left_out": len(runs[which]) - len(valid[which])}
        for which in RECEIVERS
    }
    results["healthy_receiver_got"] = len(healthy.snapshot())
    results["last_receiver_status"] = status
    parameters = {"runs": args.runs, "rate": args.rate, "error_rate": args.error_rate, "rollout": rollout(20)}
    path = write_result("notify_rollback", parameters, results)
    for which in RECEIVERS:
        stats = results[which]
        print(
            f"{which:>10}: onset -> ACK median {stats['onset_to_ack_s']['p50']:.3f} s, "
            f"decision -> ACK median {stats['decision_to_ack_s']['p50'] * 1000:.1f} ms "
            f"({stats['left_out']} run(s) left out)"
        )
    print(f"healthy receiver got {results['healthy_receiver_got']} messages; wrote {path}")


if __name__ == "__main__":
    main()
