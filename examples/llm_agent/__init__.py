"""An ACP agent backed by a real model: the OpenAI Responses API or the Anthropic Messages API, through their
official async SDKs, on acp-trio.  Run it with ``python -m examples.llm_agent --provider openai|anthropic
--model MODEL`` from the repository root; README.md beside this file says the rest."""
