"""Typed usage that `mypy --strict` must reject, one error per marked line (tests/test_typing.py)."""

from __future__ import annotations

from acp_schema.v1 import PromptRequest, TextContentBlock

wrong_keyword = TextContentBlock(txt="hi")  # E: call-arg
wrong_type = TextContentBlock(text=5)  # E: arg-type
missing_required = PromptRequest(session_id="s")  # E: call-arg
wrong_list = PromptRequest(session_id="s", prompt=["hi"])  # E: list-item
positional = TextContentBlock("hi")  # E: call-arg
