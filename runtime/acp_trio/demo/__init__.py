"""The demo: an example ACP agent and an example client built on acp-trio, in protocol versions 1 and 2.

``python -m acp_trio.demo`` spawns the example agent over stdio and drives one prompt turn with the
example client, printing the transcript: in version 1 (:mod:`acp_trio.demo.client`) by default, in
version 2 (:mod:`acp_trio.demo.client_v2`) with ``--protocol 2``.  The agent
(:mod:`acp_trio.demo.agent`) is one :class:`acp_trio.neutral.Agent` serving both versions.
``--agent -- COMMAND...`` drives any ACP agent instead; ``--serve-agent`` serves the example agent
on stdio for any ACP client, both versions side by side (the client's ``initialize`` picks one).
"""
