"""A picker that reads its pods' metrics (queue, KV cache, LoRA adapters) in the background, served on a
thread, behind a GIE gateway's data plane on the real Envoy: what the scorer tests run against."""

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


@dataclass(frozen=True)
class Metered:
    picker: Picker
    readings: Readings
    plane: DataPlane


@contextmanager
def metered(
    envoy: str, folder: Path, profile: Profile, wanted: Wanted, addresses: Sequence[str]
) -> Iterator[Metered]:
    """The picker fed `wanted`, its metrics read every 0.2 s (0.1 s timeout) from `addresses`, behind a
    `profile` data plane over them; all stopped on the way out."""
    readings = Readings()
    picker = Picker(lambda: wanted, readings=readings)
    reader = MetricsReader(readings, lambda: addresses, lambda: Scrape(interval=0.2, timeout=0.1))
    thread = PickerThread(picker).start()
    reading = thread.submit(reader.run())
    plane = DataPlane(envoy, folder, profile, PickerAddress(thread.port), list(addresses))
    try:
        plane.start()
        yield Metered(picker, readings, plane)
    finally:
        reading.cancel()
        plane.stop()
        thread.stop()
