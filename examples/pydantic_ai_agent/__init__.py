"""One pydantic-ai agent, served over ACP by acp-trio and by pydantic-acp side by side (issue 34).

``agent.py`` holds the agent (``agent``: a ``pydantic_ai.Agent`` on a scripted ``FunctionModel``, no
network, two tools, one needing approval); ``notes_mcp.py`` is a small stdio MCP server (the official
``mcp`` SDK) to give it in ``session/new``'s ``mcpServers``.  Serve it with
``python -m acp_trio.integrations.pydantic_ai examples.pydantic_ai_agent.agent:agent`` from the
repository root.
"""
