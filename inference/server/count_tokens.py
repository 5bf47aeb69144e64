"""POST /v1/messages/count_tokens: how many input tokens a Messages request would use, without running it.

The Anthropic API's token counting (its SDK's `messages.count_tokens`): the fields `model`,
`messages` and `system`, validated by the same models as /v1/messages, so a request both refuse gets
the same 400; the count is the `usage.input_tokens` the same turns get from /v1/messages. A prompt
longer than the context is counted, not refused: knowing it is too long is why one counts.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field, ValidationError
from starlette.requests import Request

from inference.server.body import read_json_object
from inference.server.errors import ApiError, from_validation
from inference.server.messages import STRICT, Message, TextBlock, error_response, prompt_of


class CountTokensRequest(BaseModel):
    model_config = STRICT

    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    system: str | list[TextBlock] | None = None


router = APIRouter()


@router.post("/v1/messages/count_tokens")
async def count_tokens(request: Request) -> Response:
    try:
        body = await read_json_object(request)
        try:
            parsed = CountTokensRequest.model_validate(body)
        except ValidationError as error:
            raise from_validation(error) from None
    except ApiError as error:
        return error_response(error)
    return JSONResponse({"input_tokens": len(prompt_of(parsed.messages, parsed.system))})
