"""The pods bench/epp_picking.py balances: engine stand-ins with a prefix cache (one process and one
loopback address each), or real llama.cpp servers; each kind says how its caches are emptied and what its
prefix-cache counters read."""

from __future__ import annotations

import asyncio
import functools
import sys
from pathlib import Path
from typing import Protocol

import httpx
from prometheus_client.parser import text_string_to_metric_families

from graystack.local.processes import ManagedProcess, free_port, start_process
from tests.support.prefix_engine import Pace, engine_argv
from tests.support.third_party.models import tiny_model
from tests.support.third_party.servers import ThirdPartyServer, start_llama_cpp

Counters = dict[str, float]


class Pods(Protocol):
    """`endpoints`: `ip:port` each; `reset`: every cache empty; `counters`: the prefix cache's hits and
    queries in tokens, summed over the pods (None where the servers export none)."""

    endpoints: list[str]

    async def reset(self) -> None: ...

    async def counters(self) -> Counters | None: ...

    def stop(self) -> None: ...


class StandinPods:
    def __init__(self, processes: list[ManagedProcess], endpoints: list[str]) -> None:
        self.processes, self.endpoints = processes, endpoints

    async def reset(self) -> None:
        async with httpx.AsyncClient(timeout=10) as client:
            for endpoint in self.endpoints:
                (await client.post(f"http://{endpoint}/reset_prefix_cache")).raise_for_status()

    async def counters(self) -> Counters | None:
        summed = await _summed(
            self.endpoints, ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
        )
        return {
            "hits": summed["vllm:prefix_cache_hits_total"],
            "queries": summed["vllm:prefix_cache_queries_total"],
        }

    def stop(self) -> None:
        for process in self.processes:
            process.stop()


async def _summed(endpoints: list[str], names: tuple[str, ...]) -> dict[str, float]:
    """Each named sample of the pods' Prometheus metrics, summed over their labels and the pods."""
    totals = dict.fromkeys(names, 0.0)
    async with httpx.AsyncClient(timeout=5) as client:
        answers = await asyncio.gather(*(client.get(f"http://{e}/metrics") for e in endpoints))
    for answer in answers:
        for family in text_string_to_metric_families(answer.raise_for_status().text):
            for sample in family.samples:
                if sample.name in totals:
                    totals[sample.name] += sample.value
    return totals


def _healthy(url: str) -> bool:
    return httpx.get(url).status_code == 200


def standin_pods(count: int, pace: Pace, folder: Path) -> StandinPods:
    """`count` engines on 127.0.10.2, .3, ... (one port, one address each, as GIE treats an IP as a pod)."""
    port = free_port()
    hosts = [f"127.0.10.{2 + i}" for i in range(count)]
    processes = [
        start_process(f"engine-{i}", [sys.executable, *engine_argv(f"pod-{i}", host, port, pace)], folder)
        for i, host in enumerate(hosts)
    ]
    pods = StandinPods(processes, [f"{host}:{port}" for host in hosts])
    try:
        for process, endpoint in zip(processes, pods.endpoints, strict=True):
            process.wait_healthy(functools.partial(_healthy, f"http://{endpoint}/health"), 30, endpoint)
    except BaseException:
        pods.stop()
        raise
    return pods


class LlamaCppPods:
    """llama.cpp's servers (the tiny model, one thread each, `context` tokens). It has no endpoint that
    empties its prompt cache: a reset restarts them, on their ports (the data plane's endpoints stay).
    """

    def __init__(self, count: int, folder: Path, context: int) -> None:
        self.model, self.folder, self.context = tiny_model(), folder, context
        self.servers: list[ThirdPartyServer] = []
        self.ports = [free_port() for _ in range(count)]
        self.endpoints = [f"127.0.0.1:{port}" for port in self.ports]

    def start(self) -> LlamaCppPods:
        for port in self.ports:
            self.servers.append(start_llama_cpp(self.model, self.folder, port=port, context=self.context))
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers = []

    async def reset(self) -> None:
        self.stop()
        await asyncio.to_thread(self.start)

    async def counters(self) -> Counters | None:
        """From llama.cpp's counters of the prompt tokens taken from its cache and of those it processed."""
        cached, processed = "llamacpp:prompt_tokens_cached_total", "llamacpp:prompt_tokens_total"
        summed = await _summed(self.endpoints, (cached, processed))
        return {"hits": summed[cached], "queries": summed[cached] + summed[processed]}
