"""A picker that reads its pods' metrics (queue, KV cache, LoRA adapters) in the background, served on a
thread: alone (`reading`, in front of graystack's own Envoy) or behind a GIE gateway's data plane on the
real Envoy (`metered`): what the scorer tests run against."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gateway.epp.metrics_reader import MetricsReader, Scrape
from gateway.epp.picker import Picker
from gateway.epp.readings import Readings
from gateway.epp.wanted import Wanted
from tests.support.gie_data_plane import DataPlane, PickerAddress, Profile
from tests.support.picker_thread import PickerThread


def vllm(waiting: float, kv: float) -> str:
    """A pod's metrics as vLLM exports its queue and KV-cache use (a NamedUpstream's `metrics`)."""
    return (
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f'vllm:kv_cache_usage_perc{{model_name="m"}} {kv}\n'
    )


@dataclass(frozen=True)
class Reading:
    picker: Picker
    readings: Readings
    thread: PickerThread


@dataclass(frozen=True)
class Metered:
    picker: Picker
    readings: Readings
    plane: DataPlane


@contextmanager
def reading(wanted: Wanted, addresses: Sequence[str]) -> Iterator[Reading]:
    """The picker fed `wanted`, served in plaintext, its metrics read every 0.2 s (0.1 s timeout) from
    `addresses`; stopped on the way out."""
    readings = Readings()
    picker = Picker(lambda: wanted, readings=readings)
    reader = MetricsReader(readings, lambda: addresses, lambda: Scrape(interval=0.2, timeout=0.1))
    thread = PickerThread(picker).start()
    read = thread.submit(reader.run())
    try:
        yield Reading(picker, readings, thread)
    finally:
        read.cancel()
        thread.stop()


@contextmanager
def metered(
    envoy: str, folder: Path, profile: Profile, wanted: Wanted, addresses: Sequence[str]
) -> Iterator[Metered]:
    """`reading`'s picker behind a `profile` data plane over `addresses`; all stopped on the way out."""
    with reading(wanted, addresses) as read:
        plane = DataPlane(envoy, folder, profile, PickerAddress(read.thread.port), list(addresses))
        try:
            plane.start()
            yield Metered(read.picker, read.readings, plane)
        finally:
            plane.stop()
