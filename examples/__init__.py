"""Examples built on acp-trio (not part of the ``acp_trio`` package); run them from the repository root."""
