"""vLLM's routes beside the OpenAI API: /tokenize and /detokenize (a prompt or
chat messages to token ids and back, through the served model's tokenizer and
chat template) and /ping (liveness, as /health)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, model_validator

from gateway.protocol import ChatMessage, GatewayError


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    return_token_strs: bool = False

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either prompt or messages")
        return self


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    tokens: list[int]


def add_tokenizer_routes(app: FastAPI, gateway: Any) -> None:
    """/tokenize, /detokenize and /ping over ``gateway`` (an app.Gateway)."""

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        gateway.check_model(body)
        prompts = gateway.prompts
        if body.messages is not None:
            ids = await asyncio.to_thread(prompts.chat, body.messages, body.add_generation_prompt)
        else:
            text = body.prompt or ""
            add = body.add_special_tokens
            ids = await asyncio.to_thread(prompts.encode, text, add_special_tokens=add)
        out: dict[str, Any] = {
            "count": len(ids),
            "max_model_len": gateway.backend.max_model_len,
            "tokens": ids,
        }
        if body.return_token_strs:
            out["token_strs"] = prompts.tokenizer.convert_ids_to_tokens(ids)
        return out

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, str]:
        gateway.check_model(body)
        return {"prompt": await asyncio.to_thread(gateway.prompts.decode, body.tokens)}

    @app.api_route("/ping", methods=["GET", "POST"])
    async def ping() -> JSONResponse:
        why_not = gateway.backend.unready()
        if why_not is None:
            return JSONResponse({"status": "ok"})
        raise GatewayError(why_not, 503)
