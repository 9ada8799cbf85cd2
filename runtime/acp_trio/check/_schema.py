"""The pinned schema of one protocol variant, as validators for what an agent sends.

The schema is ``acp_schema.<variant>/schema.json`` (the file pinned in ``schema/PINNED.json``,
copied by the generator).  Each ``$def`` that carries ``x-method`` is the params of a request or
notification (name ending ``Request`` or ``Notification``) or the result of a request (``Response``);
``x-side`` says who handles the method.  An agent's requests and notifications are checked
against the client-side params, its responses against the result of the method the checker
asked; an error against ``$defs/Error``.  Extension methods (``_``-prefixed) are not checked.
"""

from __future__ import annotations

import functools
import importlib.resources
from typing import Any

import jsonschema
import orjson


class WireSchema:
    """Validators for one variant (``"v1"``, ``"v2"``, ``"v1_unstable"``, ...)."""

    def __init__(self, variant: str) -> None:
        self.variant = variant
        text = (importlib.resources.files(f"acp_schema.{variant}") / "schema.json").read_bytes()
        self.schema: dict[str, Any] = orjson.loads(text)
        self.defs: dict[str, Any] = self.schema["$defs"]
        self.params: dict[tuple[str, str], str] = {}  # (side, method) → params $def
        self.results: dict[str, str] = {}  # method → result $def (handled by the agent)
        self.client_results: dict[str, str] = {}  # method → result $def (handled by the client)
        for name, definition in self.defs.items():
            method, side = definition.get("x-method"), definition.get("x-side")
            if not isinstance(method, str):
                continue
            if name.endswith("Response"):
                if side in ("agent", "protocol"):
                    self.results[method] = name
                elif side == "client":
                    self.client_results[method] = name
            else:
                self.params[(side, method)] = name
        self._validators: dict[str, jsonschema.protocols.Validator] = {}

    def validator(self, name: str) -> jsonschema.protocols.Validator:
        found = self._validators.get(name)
        if found is None:
            found = jsonschema.Draft202012Validator({"$defs": self.defs, "$ref": f"#/$defs/{name}"})
            self._validators[name] = found
        return found

    def problem(self, value: Any, name: str, what: str) -> str | None:
        """``None`` if ``value`` validates against ``$defs/<name>``, else "what: why (at path)"."""
        error = jsonschema.exceptions.best_match(self.validator(name).iter_errors(value))
        if error is None:
            return None
        where = "/".join(str(part) for part in error.absolute_path) or "(top)"
        return f"{what}: {error.message[:200]} at {where} ($defs/{name})"

    def check_from_agent(self, method: str, params: Any, is_request: bool) -> str | None:
        """A request or notification the agent sent: its params against the client side's ``$def``."""
        if method.startswith("_"):
            return None
        name = self.params.get(("client", method)) or self.params.get(("protocol", method))
        if name is None:
            kind = "request" if is_request else "notification"
            return f"{kind} {method}: no such method for a client in the {self.variant} schema"
        return self.problem(params, name, f"{method} params")

    def check_response(self, method: str | None, message: dict[str, Any]) -> str | None:
        """A response from the agent to the checker's ``method`` request (``None``: an id it never sent)."""
        if "error" in message:
            if "result" in message:
                return f"a response with both result and error (id {message.get('id')!r})"
            return self.problem(message["error"], "Error", f"error answering {method or 'an unknown id'}")
        if "result" not in message:
            return f"a message with neither method, result nor error: {orjson.dumps(message).decode()[:120]}"
        if method is None or method.startswith("_") or method not in self.results:
            return None
        return self.problem(message["result"], self.results[method], f"{method} result")


@functools.cache
def wire_schema(variant: str) -> WireSchema:
    """The :class:`WireSchema` of ``variant``, made once per process (``ModuleNotFoundError`` if unknown)."""
    return WireSchema(variant)
