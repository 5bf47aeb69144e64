"""POST /v1/embeddings: OpenAI's embeddings format, so the gateway's `/v1/embeddings` has a graystack
server behind it too.

Fields: model (any name; echoed back), input (a string or a list of strings, none empty), encoding_format
(`float`, or `base64`: little-endian float32, what the official SDK asks for by default), user (ignored).
A vector is the model's final hidden states mean-pooled over the prompt, unit length
(TinyDecoder.embedding); the prompt is the text's bytes after BOS, as generation reads them. No tokens
are generated, so no time to first token is recorded: the request is counted, as every request is.
Each input runs outside the engine's batches, off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Annotated, Literal

import torch
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.requests import Request

from inference.config import BOS
from inference.server.body import read_json_object
from inference.server.errors import ApiError, from_validation, invalid
from inference.server.openai_chat import STRICT, error_response
from inference.server.serving import Serving

MAX_INPUTS = 64

Text = Annotated[str, Field(min_length=1)]


class EmbeddingsRequest(BaseModel):
    model_config = STRICT

    model: str = Field(min_length=1)
    input: Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_INPUTS)]
    encoding_format: Literal["float", "base64"] = "float"
    user: str | None = None


def _encoded(vector: torch.Tensor, encoding: str) -> list[float] | str:
    if encoding == "base64":
        return base64.b64encode(vector.numpy().astype("<f4").tobytes()).decode()
    return vector.tolist()


async def _vectors(serving: Serving, texts: list[str]) -> tuple[list[torch.Tensor], int]:
    """Each text's vector and the prompt tokens they took; 400 for a text longer than the context."""
    model = serving.engine.model
    prompts = [[BOS, *text.encode()] for text in texts]
    for index, prompt in enumerate(prompts):
        if len(prompt) > serving.engine.context:
            raise invalid(
                f"input.{index}: {len(prompt)} tokens exceed the context of {serving.engine.context}"
            )
    vectors = [await asyncio.to_thread(model.embedding, torch.tensor(prompt)) for prompt in prompts]
    return vectors, sum(len(prompt) for prompt in prompts)


router = APIRouter()


@router.post("/v1/embeddings")
async def embeddings(request: Request) -> Response:
    serving: Serving = request.app.state.serving
    try:
        await serving.faults.inject()
        body = await read_json_object(request)
        try:
            parsed = EmbeddingsRequest.model_validate(body)
        except ValidationError as error:
            raise from_validation(error) from None
        texts = [parsed.input] if isinstance(parsed.input, str) else parsed.input
        vectors, tokens = await _vectors(serving, texts)
    except ApiError as error:
        serving.metrics.count(error.status)
        return error_response(error)
    serving.metrics.count(200)
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(v, parsed.encoding_format)}
        for i, v in enumerate(vectors)
    ]
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return JSONResponse({"object": "list", "data": data, "model": parsed.model, "usage": usage})
