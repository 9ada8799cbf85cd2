"""A tiny MCP server over stdio for the example pydantic-ai agent: one tool, ``word_count``.

``python examples/pydantic_ai_agent/notes_mcp.py`` serves the Model Context Protocol on stdin/stdout
(the official ``mcp`` SDK: ``pip install 'acp-trio[mcp]'``).  Give it to the agent in ``session/new``::

    {"name": "notes", "command": "/path/to/python", "args": ["examples/pydantic_ai_agent/notes_mcp.py"], "env": []}

The example agent's scripted model (``agent.py``) calls ``word_count`` on the note it writes
whenever a tool whose name ends in ``word_count`` is offered to it.
"""

from __future__ import annotations


def count_words(text: str) -> int:
    """How many whitespace-separated words ``text`` has."""
    return len(text.split())


def main() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer(name="notes", version="1")

    @server.tool()
    def word_count(text: str) -> int:
        """Count the words of a text (words are separated by whitespace)."""
        return count_words(text)

    server.run("stdio")


if __name__ == "__main__":
    main()
