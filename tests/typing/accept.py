"""Typed usage that `mypy --strict` must accept (checked by tests/test_typing.py)."""

from __future__ import annotations

from acp_schema.v1 import (
    UNSET,
    ContentBlock,
    ImageContentBlock,
    PromptRequest,
    PromptResponse,
    TextContentBlock,
)
from acp_trio import converter


def build() -> PromptRequest:
    blocks: list[ContentBlock] = [TextContentBlock(text="hi"), ImageContentBlock(data="AAAA", mime_type="image/png")]
    return PromptRequest(session_id="s", prompt=blocks)


def stop_reason(raw: object) -> str:
    result = converter.structure(raw, PromptResponse)
    reason: str = result.stop_reason
    return reason


def first_text(req: PromptRequest) -> str | None:
    for block in req.prompt:
        if isinstance(block, TextContentBlock):
            return block.text
    return None


def meta_keys(req: PromptRequest) -> list[str]:
    if req.meta is UNSET or req.meta is None:
        return []
    return sorted(req.meta)
