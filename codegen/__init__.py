"""acp-trio's generator: pinned ACP JSON schemas -> ``generated/acp_schema`` (attrs types, tables, stubs).

Run ``python -m codegen`` to regenerate and ``python -m codegen --check`` to verify that
``generated/`` is current.  It imports neither ``acp_schema`` nor the runtime's converter.
"""
