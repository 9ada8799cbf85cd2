"""Integrations: agents written on other frameworks, served over ACP by acp-trio.

- :mod:`acp_trio.integrations.pydantic_ai`: any ``pydantic_ai.Agent`` as an ACP agent of both
  protocol versions (the ``pydantic-ai`` extra: ``pip install 'acp-trio[pydantic-ai]'``).

Each integration lives in its own subpackage, imported only when used, so this package costs nothing
to import and needs none of the frameworks.
"""
