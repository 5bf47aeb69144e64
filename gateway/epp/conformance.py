"""GIE's conformance test hooks (pure), so that GIE's own conformance suite can drive `graystack epp` as it
drives GIE's conformance picker (its `header-based-testing-filter` and `destination-endpoint-served-verifier`
plugins): the request header `test-epp-endpoint-selection` names the endpoints the picker may choose from,
and the answer carries the endpoint that served in `x-conformance-test-served-endpoint`. Off unless
`graystack epp --conformance-test-headers`: a client must never steer a production picker.

Where GIE's filter has no header it leaves nothing to pick (503); here a request without it is picked as
usual, so a picker in this mode still serves traffic that is not the suite's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

SELECTION = "test-epp-endpoint-selection"  # "IP" (any of its target ports) or "IP:PORT", comma-separated
SERVED = "x-conformance-test-served-endpoint"


def _host(endpoint: str) -> str:
    return endpoint.rpartition(":")[0].strip("[]")


def selection(headers: Mapping[str, str], endpoints: Iterable[str]) -> frozenset[str] | None:
    """The pool's endpoints (`ip:port`) that the test header names: an IP names each of its ports (the
    data-parallel ranks), an `IP:PORT` itself; None where the request has no such header."""
    value = headers.get(SELECTION, "")
    named = {item.strip() for item in value.split(",") if item.strip()}
    if not named:
        return None
    hosts = {item.strip("[]") for item in named}
    return frozenset(e for e in endpoints if e in named or _host(e) in hosts)


def narrow(subset: frozenset[str] | None, chosen: frozenset[str] | None) -> frozenset[str] | None:
    """The gateway's subset hint and the test header's selection together (None: no restriction)."""
    if subset is None or chosen is None:
        return chosen if subset is None else subset
    return subset & chosen
