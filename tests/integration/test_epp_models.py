"""Model variants through `graystack epp` on a GIE data plane on the real Envoy 1.40 (issue 37, item 3): a
variant that is a model name served by the baseline's pods. Its requests' bodies reach the pods with
`model` rewritten (the picker answers the request headers once it holds the whole body, FULL_DUPLEX_STREAMED,
and sends the rewritten body back as one chunk, its new content-length in the headers' answer); a cohort
keeps one model; bodies that cannot be rewritten (not JSON, no `model`, over the bound) are routed as they
came, answered 200, and counted by reason. The answer is the server's, untouched."""

from __future__ import annotations

import json
import random

import httpx
import pytest

from gateway.epp.picker import Outcome, Picker
from gateway.epp.wanted import Wanted
from graystack.local.processes import free_port, wait_until
from tests.support.gie_data_plane import DataPlane, PickerAddress
from tests.support.named_upstreams import MODEL_HEADER, NAME_HEADER, serving
from tests.support.picker_thread import PickerThread

pytestmark = pytest.mark.integration

PORT = free_port()
HOSTS = {"pod-0": "127.0.8.2", "pod-1": "127.0.8.3"}
ADDRESSES = tuple(f"{host}:{PORT}" for host in HOSTS.values())
BASE, LORA = "llama-3", "llama-3-lora-v2"
BOUND = 64 * 1024  # the picker's bound in these tests, so that an over-bound body stays small


def body(model: str | None = BASE, **more: object) -> bytes:
    document = {"prompt": "Write as if you were a critic: San Francisco", "max_tokens": 8, **more}
    if model is not None:
        document["model"] = model
    return json.dumps(document).encode()


class Gateway:
    def __init__(self) -> None:
        self.now = Wanted(pods={"baseline": ADDRESSES}, weights={"baseline": 100}, baseline="baseline")
        self.outcomes: list[Outcome] = []
        self.picker = Picker(lambda: self.now, draw=random.Random(3).random, on_outcome=self.outcomes.append)
        self.thread = PickerThread(self.picker, bound=BOUND)
        self.url = ""
        self.client = httpx.Client(timeout=10)

    def models(self, weights: dict[str, int], **kw: object) -> None:
        self.now = Wanted(
            pods={"baseline": ADDRESSES},
            weights=weights,
            baseline="baseline",
            models={"canary": LORA},
            **kw,  # type: ignore[arg-type]
        )

    def post(self, content: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
        answer = self.client.post(f"{self.url}/v1/completions", content=content, headers=headers or {})
        assert answer.status_code == 200, (answer.status_code, answer.text)
        assert answer.headers[NAME_HEADER] in HOSTS
        return answer


@pytest.fixture(scope="module")
def pods():
    yield from serving(HOSTS, PORT)


@pytest.fixture(scope="module", params=["original_dst", "override_host"])
def gateway(request, pods, envoy_binary, tmp_path_factory):
    gw = Gateway()
    gw.thread.start()
    plane = DataPlane(
        envoy_binary,
        tmp_path_factory.mktemp(request.param),
        request.param,
        PickerAddress(gw.thread.port),
        list(ADDRESSES),
    )
    try:
        plane.start()
        gw.url = plane.url
        yield gw
    finally:
        plane.stop()
        gw.thread.stop()
        gw.client.close()


@pytest.fixture
def gw(gateway):
    wait_until(lambda: not gateway.picker.in_flight(), 10, "the streams before to end")
    gateway.outcomes.clear()
    return gateway


def test_a_model_variant_at_100_percent_rewrites_every_requests_model(gw, pods):
    gw.models({"canary": 100})
    for n in range(20):
        sent = body(stream=False, n=n, text="é ü 日本")
        answer = gw.post(sent)
        assert answer.headers[MODEL_HEADER] == LORA
        received = json.loads(pods[answer.headers[NAME_HEADER]].last_body)
        assert received == {**json.loads(sent), "model": LORA}  # the rest of the body as it was sent
        assert answer.text == answer.headers[NAME_HEADER]  # the answer: the server's, untouched
    wait_until(lambda: len(gw.outcomes) == 20, 5, "every stream's end")
    assert {o.variant for o in gw.outcomes} == {"canary"}
    assert {o.picked for o in gw.outcomes} == set(ADDRESSES)  # the baseline's pods serve it


def test_a_model_variant_rewrites_a_large_body_sent_in_chunks(gw, pods):
    gw.models({"canary": 100})
    sent = body(prompt="x" * 40_000)  # under the bound, over Envoy's chunk size
    answer = gw.post(sent)
    assert answer.headers[MODEL_HEADER] == LORA
    assert json.loads(pods[answer.headers[NAME_HEADER]].last_body)["prompt"] == "x" * 40_000


def test_at_a_50_50_split_each_cohort_sees_one_model(gw):
    gw.models({"baseline": 50, "canary": 50}, cohort_header="x-user")
    seen = {}
    for user in range(16):
        models = {gw.post(body(), {"x-user": f"user-{user}"}).headers[MODEL_HEADER] for _ in range(6)}
        assert len(models) == 1, (user, models)
        seen[user] = models.pop()
    assert set(seen.values()) == {BASE, LORA}


def test_the_baseline_keeps_todays_path(gw):
    gw.models({"baseline": 100})
    assert gw.post(body()).headers[MODEL_HEADER] == BASE
    assert gw.post(b"not json").headers[MODEL_HEADER] == ""


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"not json {", "not JSON"),
        (bytes(range(256)), "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (body(None), "no model"),
        (body(prompt="x" * (2 * BOUND)), "too large"),
    ],
    ids=["not-json", "binary", "array", "no-model", "over-the-bound"],
)
def test_a_body_that_cannot_be_rewritten_is_routed_unchanged(gw, pods, content, reason):
    gw.models({"canary": 100})
    before = gw.thread.unchanged.get(reason, 0)
    answer = gw.post(content)
    assert pods[answer.headers[NAME_HEADER]].last_body == content
    assert answer.headers[MODEL_HEADER] == (BASE if reason == "too large" else "")
    assert gw.thread.unchanged.get(reason, 0) == before + 1
    wait_until(lambda: len(gw.outcomes) == 1, 5, "the stream's end")
    assert gw.outcomes[0].variant == "baseline"  # counted as the baseline's: its model served it


def test_a_request_without_a_body_is_routed(gw):
    gw.models({"canary": 100})
    assert gw.client.get(gw.url).status_code == 200
