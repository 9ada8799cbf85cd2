"""acp_trio.aio, asyncio → trio in a FastAPI app: examples/asyncio_fastapi.py, driven in process by
httpx2 on asyncio through the ASGI interface (no network), with the app's lifespan run as a server
runs it."""

from __future__ import annotations

import asyncio
import importlib
import warnings
from typing import Any

import httpx2
import pytest

pytest.importorskip("fastapi")

DEADLINE = 60  # seconds; the agent is a process (about a second on a loaded machine)


@pytest.mark.one_interpreter  # spawns the demo agent: the subject is the example, not the interpreter
def test_a_fastapi_endpoint_runs_a_full_turn_through_a_held_acp_trio_connection() -> None:
    example = importlib.import_module("examples.asyncio_fastapi")

    async def main() -> list[Any]:
        answers = []
        async with asyncio.timeout(DEADLINE), example.app.router.lifespan_context(example.app):
            transport = httpx2.ASGITransport(app=example.app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://app") as http:
                for _ in range(2):  # two turns through the one connection
                    response = await http.post("/prompt", json={"text": "Please summarize notes.txt."})
                    answers.append((response.status_code, response.json()))
        return answers

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answers = asyncio.run(main())
    assert [str(w.message) for w in caught] == []
    done = "Done: summary.txt says 'notes.txt has 2 non-empty lines; the first is: buy milk'"
    expected = {"stop_reason": "end_turn", "messages": ["Let me read your notes and write a summary.", done]}
    assert answers == [(200, expected), (200, expected)]
