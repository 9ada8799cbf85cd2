"""The demo: an example ACP agent and an example client built on acp-trio.

``python -m acp_trio.demo`` spawns the example agent (:mod:`acp_trio.demo.agent`) over stdio and
drives one prompt turn with the example client (:mod:`acp_trio.demo.client`), printing the
transcript.  ``--agent -- COMMAND...`` drives any ACP agent instead; ``--serve-agent`` serves the
example agent on stdio for any ACP client.
"""
