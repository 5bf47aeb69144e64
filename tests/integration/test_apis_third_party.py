"""The Responses API of servers nobody here wrote, through the gateway's default API table: llama.cpp's
and `transformers serve`'s `/v1/responses`, streamed through the official `openai` SDK, each measured
as a complete answer of the `responses` API with a first token (transformers serve sends its events
without `event:` lines, its `type` after the other fields). Neither serves `GET /v1/responses/{id}` nor
keeps a conversation, and this repo's llama.cpp runs without `--embeddings` (an embeddings-only mode)
while transformers serve has no `/v1/embeddings`: those are shown on graystack's own servers
(tests/integration/test_apis.py)."""

from __future__ import annotations

import pytest
from openai import AsyncOpenAI

from tests.support.measured import ROUTED_HEADER, measured_gateway
from tests.support.third_party.models import MODEL_NAME

pytestmark = pytest.mark.integration


async def test_llama_cpp_and_transformers_serve_responses_are_measured_as_complete(
    tmp_path, envoy_binary, llama_cpp, transformers_serve
):
    variants = {"llama-cpp": llama_cpp.port, "transformers": transformers_serve.port}
    async with measured_gateway(
        tmp_path, envoy_binary, variants, {name: name for name in variants}
    ) as measured:
        client = AsyncOpenAI(base_url=f"{measured.url}/v1", api_key="unused", timeout=60, max_retries=0)
        try:
            for server in variants:
                cursor = measured.gateway.answers.cursor
                stream = await client.responses.create(
                    model=MODEL_NAME,
                    input="Hi",
                    max_output_tokens=8,
                    stream=True,
                    extra_headers={ROUTED_HEADER: server},
                )
                kinds = [event.type async for event in stream]
                (answer,) = await measured.answers(cursor, 1)
                case = (server, kinds, answer)
                assert "response.output_text.delta" in kinds, case
                assert kinds[-1] == "response.completed", case
                assert (answer.api, answer.variant, answer.streamed) == ("responses", server, True), case
                assert (answer.ending, answer.failed, answer.finish) == ("complete", False, "stop"), case
                assert answer.ttft is not None, case
                assert answer.output_tokens is not None, case
                assert 1 <= answer.output_tokens <= 8, case
                assert answer.unreadable == 0, case
        finally:
            await client.close()
