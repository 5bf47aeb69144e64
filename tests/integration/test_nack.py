"""A resource Envoy rejects: the last ACKed version keeps serving, the NACK is counted, never re-sent
in a loop, and shown by `graystack status`.

The gateway runs in this test's process so the test can put a resource that the gateway itself
would never build (a split whose weights are all zero; Envoy NACKs it) straight into its cache.
Envoy, the upstreams and the `graystack status` CLI are the real ones.
"""

import asyncio
import sys

import httpx
from prometheus_client import REGISTRY

from gateway.app import GatewayOptions
from gateway.envoy.resources import ListenerAddress, build_resources
from gateway.local import local_gateway
from gateway.sources.endpoints import static_endpoints
from gateway.xds.types import ROUTE
from graystack.local.gateway_stack import INFERENCE_PATH, GatewayStack
from graystack.local.processes import start_process


async def poll(check, seconds: float, what: str):
    async with asyncio.timeout(seconds):
        while True:
            try:
                result = await check()
            except httpx.HTTPError:
                result = None
            if result:
                return result
            await asyncio.sleep(0.05)


def all_zero_weights(route_config) -> None:
    for route in route_config.virtual_hosts[0].routes:
        for cluster in route.route.weighted_clusters.clusters:
            cluster.weight.value = 0


async def test_a_rejected_route_leaves_the_last_acked_one_serving(tmp_path, envoy_binary):
    stack = GatewayStack(tmp_path, envoy_binary)  # for its upstreams, ports and spec; the gateway runs here
    stack.start_upstreams()
    spec = stack.spec
    spec["routing"]["weights"] = {"baseline": 0, "zero-layer": 100}
    stack.write_spec(spec)
    gateway = local_gateway(
        GatewayOptions(spec=stack.spec_path, xds_port=stack.ports["xds"], admin_port=stack.ports["admin"])
    )
    await gateway.start()
    bootstrap = tmp_path / "envoy.yaml"
    bootstrap.write_text(stack.bootstrap_yaml())
    stack.envoy = start_process(
        "envoy", [envoy_binary, "-c", str(bootstrap), "--disable-hot-restart"], stack.logs
    )
    listener = f"http://127.0.0.1:{stack.ports['listen']}"
    try:
        async with httpx.AsyncClient(base_url=listener, timeout=5) as client:

            async def variant_served():
                response = await client.post(INFERENCE_PATH, json={})
                return response.status_code == 200 and response.headers["x-graystack-variant"]

            assert await poll(variant_served, 30, "Envoy to serve") == "zero-layer"
            assert await gateway.ads.wait_converged(seconds=10)
            good_version = gateway.cache.get(stack.node_id).version(ROUTE)
            nacks = REGISTRY.get_sample_value("graystack_xds_nacks_total", {"type": "rds"}) or 0.0

            live = gateway.gateway.live
            listen = ListenerAddress("127.0.0.1", stack.ports["listen"])
            resources = build_resources(live, static_endpoints(live), listen).by_type()
            all_zero_weights(resources[ROUTE][0])
            gateway.cache.set_resources(stack.node_id, resources)

            assert not await gateway.ads.wait_converged(seconds=10)
            pushes = REGISTRY.get_sample_value("graystack_xds_pushes_total", {"type": "rds"})
            await asyncio.sleep(1.0)
            assert (
                REGISTRY.get_sample_value("graystack_xds_pushes_total", {"type": "rds"}) == pushes
            )  # no loop
            assert REGISTRY.get_sample_value("graystack_xds_nacks_total", {"type": "rds"}) == nacks + 1

            (proxy,) = gateway.ads.streams()
            assert proxy.types["rds"].rejected
            assert proxy.types["rds"].acked == good_version
            assert (
                "Sum of weights in the weighted_cluster must be greater than 0"
                in proxy.types["rds"].last_nack.message
            )
            assert [await variant_served() for _ in range(20)] == ["zero-layer"] * 20  # last good config

            envoy_view = await client.get(
                f"http://127.0.0.1:{stack.ports['envoy_admin']}/config_dump",
                params={"resource": "dynamic_route_configs"},
            )
            assert envoy_view.json()["configs"][0]["version_info"] == good_version

            cli = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "graystack",
                "status",
                "--admin-url",
                stack.admin_url,
                stdout=asyncio.subprocess.PIPE,
            )
            out, _ = await cli.communicate()
            shown = out.decode()
            assert "NOT converged" in shown
            assert "REJECTED (serving the last ACKed version)" in shown
            assert "Sum of weights in the weighted_cluster must be greater than 0" in shown
    finally:
        await gateway.stop()
        stack.stop()
