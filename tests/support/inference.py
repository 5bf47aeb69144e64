"""Small models and in-process model servers for tests: fast on a CPU, real code paths throughout."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from inference.checkpoint import LoadedModel, init_checkpoint, load_model
from inference.config import ModelConfig
from inference.model import TinyDecoder
from inference.server.app import ServerOptions, create_app

# One layer, context 256, bias window 16 (skip distance about 8): long prompts skip bias blocks.
TINY = ModelConfig(d_model=32, n_layers=1, n_heads=2, max_seq_len=256, bias_window=16)


def tiny_model(directory: Path, variant: str, seed: int = 0) -> LoadedModel:
    """Weights written by init_checkpoint and loaded back the way `graystack serve` loads them."""
    path = init_checkpoint(variant, directory / f"{variant}.safetensors", TINY, seed)
    return load_model(path, variant)


class GatedModel:
    """A model whose decode steps wait for `gate`: tests hold requests in flight without timing."""

    def __init__(self, model: TinyDecoder) -> None:
        self.model = model
        self.gate = threading.Event()
        self.gate.set()

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def decode(self, *args, **kwargs):
        assert self.gate.wait(timeout=30), "the test never opened the gate"
        return self.model.decode(*args, **kwargs)


def gated(loaded: LoadedModel) -> tuple[LoadedModel, GatedModel]:
    model = GatedModel(loaded.model)
    return LoadedModel(model, loaded.status, loaded.fingerprint), model  # type: ignore[arg-type]


async def wait_for(check, what: str) -> None:
    """Poll `check` for up to 10 s: tests wait on states, never on durations."""
    try:
        async with asyncio.timeout(10):
            while not check():  # noqa: ASYNC110 - engine state has no event to await
                await asyncio.sleep(0.005)
    except TimeoutError:
        raise TimeoutError(f"timed out waiting for {what}") from None


@asynccontextmanager
async def running_app(
    loaded: LoadedModel, options: ServerOptions | None = None, client_host: str = "127.0.0.1"
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The app with its lifespan run (engine started, warmed up), and an in-process client for it."""
    app = create_app(loaded, options)
    async with app.router.lifespan_context(app):
        await wait_for(lambda: app.state.serving.ready, "the warm-up generation")
        transport = httpx.ASGITransport(app=app, client=(client_host, 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://model") as client:
            yield app, client


def metric_samples(text: str) -> dict[str, list]:
    """family name -> its samples, from a /metrics page (parsed by prometheus_client's own parser)."""
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def sample_value(samples: list, name: str, **labels: str) -> float:
    return sum(s.value for s in samples if s.name == name and labels.items() <= s.labels.items())
