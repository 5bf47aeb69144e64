"""Requests picked by a check that ends at the pick, held in flight until their answer ends.

The picker the gateway serves for its own Envoy is asked one thing per request, the pick (a check:
gateway/epp/checks.py), and learns nothing more from it. The answer's end comes instead in Envoy's log
of the picks (gateway/envoy/picker_checks.py, received by gateway/answers/receiver.py): each entry names
its request by `x-request-id`, and ends the request held under it. A request whose entry never comes (an
entry Envoy dropped, a log stream that broke) is released `bound` seconds after its pick, so a lost
entry never holds a pod's count for good. Envoy keeps a client's `x-request-id` on an internal request,
so one id may name several requests: they end oldest first."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from itertools import count
from typing import Generic, TypeVar

BOUND_S = 900.0  # the longest a request is held without its entry

T = TypeVar("T")


class Held(Generic[T]):
    """`release(item)` once for each item held: at its end, or `bound` seconds after it was held."""

    def __init__(
        self, release: Callable[[T], None], clock: Callable[[], float], bound: float = BOUND_S
    ) -> None:
        self._release, self._clock, self._bound = release, clock, bound
        self._by_id: dict[str, deque[int]] = {}
        self._held: OrderedDict[int, tuple[float, str, T]] = OrderedDict()  # oldest first
        self._numbers = count()

    def hold(self, request_id: str, item: T) -> None:
        self._expire()
        number = next(self._numbers)
        self._by_id.setdefault(request_id, deque()).append(number)
        self._held[number] = (self._clock(), request_id, item)

    def ended(self, request_id: str) -> None:
        """The access log says the request `request_id` ended: its oldest held item is released."""
        numbers = self._by_id.get(request_id)
        if numbers:
            self._take(numbers.popleft(), request_id)
        self._expire()

    def __len__(self) -> int:
        return len(self._held)

    def _take(self, number: int, request_id: str) -> None:
        if not self._by_id.get(request_id):
            self._by_id.pop(request_id, None)
        _, _, item = self._held.pop(number)
        self._release(item)

    def _expire(self) -> None:
        """Release what was held longer than the bound, oldest first."""
        oldest = self._clock() - self._bound
        while self._held:
            number, (since, request_id, _) = next(iter(self._held.items()))
            if since >= oldest:
                return
            self._by_id[request_id].remove(number)
            self._take(number, request_id)
