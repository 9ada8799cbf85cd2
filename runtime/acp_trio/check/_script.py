"""The prompts the checker sends, and what each should make the agent do (``--script FILE``).

A script is a TOML or JSON file (by its extension; anything else is read as JSON) of named
prompts.  Each prompt is ``text`` and, optionally, ``expect``: behaviours the turn must show.
Example (``checks.toml``)::

    [prompts.text]          # the plain turn most checks use; default "Say hello in one short sentence."
    text = "Say hello in one short sentence."

    [prompts.long]          # a turn still running when session/cancel arrives; default: the text prompt
    text = "Count from 1 to 200, one number per line."

    [prompts.tool]          # a turn that reports a tool call (tool-calls.mdx)
    text = "Read the file acp-check-notes.txt and tell me what it says."
    expect = ["tool_call"]

    [prompts.permission]    # a turn that asks session/request_permission before acting
    text = "Create the file hello.txt containing hi."
    expect = ["permission"]

Behaviours (``expect``): ``tool_call`` (a ``tool_call`` update, or in protocol 2 a
``tool_call_update``), ``permission`` (a ``session/request_permission`` request), ``plan`` (a plan
update), ``message`` (agent message content), ``thought``, ``fs_read`` / ``fs_write`` / ``terminal``
(the request, sent to a client that advertised it: the checker's client advertises every
capability on scripted turns).  The check ``script.expectations`` runs every prompt that has an
``expect`` and reports which behaviours were missing; ``session.cancel-permission`` uses the first
prompt expecting ``permission`` and is skipped when none does.  Names other than ``text`` and
``long`` are free.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BEHAVIOURS = ("tool_call", "permission", "plan", "message", "thought", "fs_read", "fs_write", "terminal")
"""What a script prompt may ``expect`` the agent to do in its turn."""
DEFAULT_TEXT = "Say hello in one short sentence."


class ScriptError(ValueError):
    """A script file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class ScriptedPrompt:
    """One prompt: its ``text`` and the behaviours (:data:`BEHAVIOURS`) its turn must show."""

    name: str
    text: str
    expect: tuple[str, ...] = ()


@dataclass(frozen=True)
class Script:
    """The named prompts of a run (see the module docstring)."""

    prompts: Mapping[str, ScriptedPrompt] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The plain turn's text."""
        found = self.prompts.get("text")
        return found.text if found is not None else DEFAULT_TEXT

    @property
    def long(self) -> str:
        """The text of a turn to cancel mid-way (the plain one unless the script names ``long``)."""
        found = self.prompts.get("long")
        return found.text if found is not None else self.text

    def expecting(self, behaviour: str) -> ScriptedPrompt | None:
        """The first prompt whose ``expect`` names ``behaviour``, if any."""
        return next((p for p in self.prompts.values() if behaviour in p.expect), None)

    @classmethod
    def default(cls, text: str = DEFAULT_TEXT) -> Script:
        """The script used without ``--script``: one plain prompt, ``text``."""
        return cls({"text": ScriptedPrompt("text", text)})

    @classmethod
    def from_data(cls, data: Any, where: str = "the script") -> Script:
        """A script from parsed data: ``{"prompts": {NAME: {"text": str, "expect": [str, ...]}}}``.

        Raises :class:`ScriptError` naming the field that is wrong."""
        if not isinstance(data, dict) or not isinstance(data.get("prompts"), dict) or not data["prompts"]:
            raise ScriptError(f"{where}: expected a table 'prompts' of named prompts")
        prompts: dict[str, ScriptedPrompt] = {}
        for name, entry in data["prompts"].items():
            if isinstance(entry, str):
                entry = {"text": entry}
            if not isinstance(entry, dict) or not isinstance(entry.get("text"), str) or not entry["text"].strip():
                raise ScriptError(f"{where}: prompts.{name}.text must be a non-empty string")
            expect = entry.get("expect", [])
            if not isinstance(expect, list) or not all(isinstance(e, str) for e in expect):
                raise ScriptError(f"{where}: prompts.{name}.expect must be a list of strings")
            unknown = [e for e in expect if e not in BEHAVIOURS]
            if unknown:
                raise ScriptError(
                    f"{where}: prompts.{name}.expect names {unknown[0]!r}; known behaviours: {', '.join(BEHAVIOURS)}"
                )
            extra = sorted(set(entry) - {"text", "expect"})
            if extra:
                raise ScriptError(f"{where}: prompts.{name} has an unknown field {extra[0]!r} (text, expect)")
            prompts[name] = ScriptedPrompt(name, entry["text"], tuple(expect))
        return cls(prompts)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Script:
        """Read a TOML (``.toml``) or JSON script file; raises :class:`ScriptError` (or ``OSError``)."""
        where = os.fspath(path)
        with open(path, "rb") as f:
            raw = f.read()
        try:
            data = tomllib.loads(raw.decode("utf-8")) if where.endswith(".toml") else json.loads(raw)
        except (UnicodeDecodeError, tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
            raise ScriptError(f"{where}: not valid {'TOML' if where.endswith('.toml') else 'JSON'}: {exc}") from None
        return cls.from_data(data, where)
