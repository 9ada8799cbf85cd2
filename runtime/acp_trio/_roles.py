"""Typed ACP agents and clients over a :class:`~acp_trio.Connection`.

Contract: :class:`AgentSideConnection` serves an agent object and :class:`ClientSideConnection` a
client object.  Each learns the methods of the chosen variant (``acp_schema.v1`` by default) from
its generated tables: every method of the own side whose ``attr`` the object defines becomes a
route, the rest answer -32601.  Both implement :class:`acp_trio._spec.Sender`, so the generated
peer proxies work on them (``v1.ClientPeer(conn)``, ``v1.AgentPeer(conn)``).

On top of plain JSON-RPC they apply ACP's connection rules: ``initialize`` first, protocol version
negotiation, local capability enforcement (:mod:`acp_trio._capabilities`), in-order
``session/update`` per session, prompt turns that ``session/cancel`` ends with stop reason
``cancelled``, permission requests answered ``cancelled`` while their session's turn is being
cancelled, and typed extension methods.  Sources: ``docs/protocol/v1/initialization.mdx``,
``prompt-turn.mdx``, ``cancellation.mdx``, ``extensibility.mdx``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import operator
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import ModuleType
from typing import Any, Final, Literal

import trio

from . import _capabilities
from ._connection import (
    DEFAULT_EOF_GRACE,
    DEFAULT_MAX_OUTPUT_BYTES,
    Connection,
    ConnectionClosed,
    Instrumentation,
    Route,
    Tap,
    _decode_error_data,
)
from ._converter import DecodeError, is_acp_class
from ._core import INTERNAL_ERROR, INVALID_REQUEST, RequestError
from ._sessions import (
    ENDED_BY_REQUEST,
    OPENED_BY_REQUEST,
    OPENED_BY_RESPONSE,
    SESSION_METHODS,
    SessionRegistry,
    info_from,
)
from ._spec import MethodSpec

log = logging.getLogger("acp_trio")
_NO_SESSIONS: set[Any] = set()
"""The empty set a connection's sets of cancelled sessions and of allowed methods start as, shared and
never mutated: each gets a set of its own with its first element (one object fewer per connection)."""


class ProtocolVersionError(Exception):
    """The agent answered ``initialize`` with a protocol version this client cannot speak.

    The connection was closed.  ``requested``: the version the client asked for; ``answered``:
    the agent's answer; ``supported``: the versions this client speaks.
    """

    def __init__(self, requested: Any, answered: Any, supported: tuple[int, ...]) -> None:
        super().__init__(
            f"the agent chose protocol version {answered!r} (we asked for {requested!r}); "
            f"this client speaks {', '.join(map(str, supported))}: closing the connection"
        )
        self.requested = requested
        self.answered = answered
        self.supported = supported


def _default_variant() -> ModuleType:
    from acp_schema import v1

    return v1


def _versions_of(handler: Any, variant: ModuleType | None) -> dict[int, tuple[ModuleType, Any]]:
    """``{protocol version: (variant module, handler or factory)}`` from a connection's arguments.

    An object with an ``acp_handlers()`` method (not a class) is served by the ``{variant: handler}``
    mapping that method returns: a version-neutral agent (:class:`acp_trio.neutral.Agent`) gives
    one handler per protocol version it speaks, and the client's ``initialize`` picks one."""
    hook = None if isinstance(handler, type) else getattr(handler, "acp_handlers", None)
    if callable(hook):
        if variant is not None:
            raise TypeError(
                f"{type(handler).__name__} chooses its protocol versions itself (acp_handlers()): do not give variant="
            )
        handler = hook()
        if not (isinstance(handler, Mapping) and handler and all(isinstance(k, ModuleType) for k in handler)):
            raise TypeError(
                f"acp_handlers() must return a non-empty {{variant module: handler}} mapping, not {handler!r}"
            )
    if isinstance(handler, Mapping) and handler and all(isinstance(k, ModuleType) for k in handler):
        if variant is not None:
            raise TypeError("give either variant= or a {variant: handler} mapping, not both")
        versions: dict[int, tuple[ModuleType, Any]] = {}
        for module, one in handler.items():
            version = getattr(module, "PROTOCOL_VERSION", None)
            if not isinstance(version, int):
                raise TypeError(f"{module.__name__} is not a generated ACP variant (no PROTOCOL_VERSION)")
            if version in versions:
                raise ValueError(
                    f"{versions[version][0].__name__} and {module.__name__} both speak protocol version {version}: "
                    "give one variant per version"
                )
            versions[version] = (module, one)
        return versions
    module = variant if variant is not None else _default_variant()
    return {module.PROTOCOL_VERSION: (module, handler)}


_Build = Literal["object", "with connection", "without arguments"]


def _is_factory(handler: Any) -> bool:
    """Whether ``handler`` is a factory to call (a class, function, method or ``functools.partial``)
    rather than the handler object itself."""
    return isinstance(handler, (type, functools.partial)) or inspect.isfunction(handler) or inspect.ismethod(handler)


def _signature(factory: Any) -> inspect.Signature | None:
    """The signature ``factory`` is called with, or ``None`` when Python cannot tell (a builtin)."""
    if isinstance(factory, type):
        init = getattr(factory, "__init__", None)
        if getattr(init, "__name__", "") == "_no_init_or_replace_init":
            # a subclass of a Protocol (``class MyAgent(v1.Agent)``) without an __init__ of its own:
            # typing calls the first real __init__ of its MRO, which inspect does not see
            real = next(
                (
                    base.__dict__["__init__"]
                    for base in factory.__mro__
                    if getattr(base.__dict__.get("__init__", init), "__name__", "") != "_no_init_or_replace_init"
                ),
                object.__init__,
            )
            new: Any = factory.__new__
            if real is object.__init__ and new is object.__new__:
                return inspect.Signature()
            target = new if real is object.__init__ else real
            try:
                found = inspect.signature(target)
            except (TypeError, ValueError):
                return None
            params = list(found.parameters.values())
            if params and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
                params = params[1:]  # self (cls for __new__)
            return found.replace(parameters=params)
    try:
        return inspect.signature(factory)
    except (TypeError, ValueError):
        return None


_builds: weakref.WeakKeyDictionary[Any, _Build] = weakref.WeakKeyDictionary()
"""What :func:`_how_to_build` found for each factory (a server builds one handler per connection from
the same factory: reading its signature each time cost more than the rest of the connection's set-up)."""


def _how_to_build(handler: Any, side: str) -> _Build:
    """How the connection gets its handler object from ``handler`` (see :class:`AgentSideConnection`):
    it is the object; or a factory called with the connection (its signature takes one positional
    argument, or Python cannot tell); or one called without arguments (its signature takes none).
    Raises ``TypeError`` saying what to write when the signature takes neither."""
    if not _is_factory(handler):
        return "object"
    try:
        return _builds[handler]
    except (KeyError, TypeError):  # not seen yet; or not weakly referenceable
        pass
    how = _find_how_to_build(handler, side)
    with contextlib.suppress(TypeError):
        _builds[handler] = how
    return how


def _find_how_to_build(handler: Any, side: str) -> _Build:
    signature = _signature(handler)
    if signature is None:
        return "with connection"
    try:
        signature.bind(None)
        return "with connection"
    except TypeError:
        pass
    try:
        signature.bind()
        return "without arguments"
    except TypeError:
        pass
    name = getattr(handler, "__name__", None) or repr(handler)
    signature = signature.replace(return_annotation=inspect.Signature.empty)
    a = "an" if side == "agent" else "a"
    raise TypeError(
        f"cannot build the {side} from {name}{signature}: the runtime calls {a} {side} factory with the "
        f"connection (one positional argument), or with no argument when it takes none; give it "
        f"__init__(self, conn) (or no required argument), bind the others with functools.partial({name}, ...), "
        f"or pass {a} {side} object"
    )


def _method(handler: Any, attr: str) -> Any:
    """``handler``'s method ``attr``, or ``None`` when it has none or only the stub of a protocol
    class it subclasses: ``class MyAgent(v1.Agent)`` inherits an ``async def`` for every method of
    ``v1.Agent``, each returning ``None``; those count as not implemented (-32601, or the runtime's
    default answer)."""
    fn = getattr(handler, attr, None)
    if not callable(fn) or attr in getattr(handler, "__dict__", ()):
        return fn if callable(fn) else None
    for klass in type(handler).__mro__:
        if attr in klass.__dict__:
            return None if klass.__dict__.get("_is_protocol", False) is True else fn
    return fn


def _instantiate(factory: Any, conn: Any) -> Any:
    """The handler object of ``factory`` for the connection ``conn`` (see :func:`_how_to_build`)."""
    how = _how_to_build(factory, conn.side)
    if how == "object":
        return factory
    return factory(conn) if how == "with connection" else factory()


class _Side:
    """What agent and client connections share: routes from the tables, extensions, Sender."""

    side: Literal["agent", "client"]
    _intercepted: frozenset[str] = frozenset()  # outbound requests that go through _request

    def __init__(
        self,
        handler: Any,
        send_stream: trio.abc.SendStream,
        receive_stream: trio.abc.ReceiveStream,
        *,
        variant: ModuleType | None = None,
        tap: Tap | None = None,
        max_message_size: int | None = None,
        close_timeout: float = 2.0,
        name: str | None = None,
        instrumentation: Instrumentation | None = None,
        eof_grace: float | None = DEFAULT_EOF_GRACE,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> None:
        self._versions = _versions_of(handler, variant)
        for _, one in self._versions.values():  # a factory that cannot be called raises now, not at initialize
            _how_to_build(one, self.side)
        self.supported_versions: tuple[int, ...] = tuple(sorted(self._versions))
        """The protocol versions this side speaks (one per variant it was given), ascending."""
        latest = self.supported_versions[-1]
        self.variant: ModuleType = self._versions[latest][0]
        """The generated variant module in use: the latest one until ``initialize`` negotiated another."""
        self.protocol_version: int = latest
        """The protocol version in use: negotiated by ``initialize`` (until then the latest supported)."""
        options: dict[str, Any] = {
            "tap": tap,
            "close_timeout": close_timeout,
            "name": name or self.side,
            "instrumentation": instrumentation,
            "eof_grace": eof_grace,
            "max_output_bytes": max_output_bytes,
        }
        if max_message_size is not None:
            options["max_message_size"] = max_message_size
        self.connection = Connection(send_stream, receive_stream, **options)
        self.sessions = SessionRegistry()
        """The open sessions (:class:`acp_trio.SessionRegistry`): who opened them, with which
        ``cwd`` and roots; they end on ``session/close``/``session/delete`` or when the connection closes."""
        self.connection.add_close_callback(self.sessions.close)
        # per method: (encoder, True when sending has rules / a hook callable that sends it instead)
        self._notify_plans: dict[str, tuple[Callable[[Any], Any], Any, Callable[[Any], bool]]] = {}
        # per method: (its spec, params encoder, result decoder, whether it goes through _request)
        self._request_plans: dict[str, tuple[MethodSpec, Callable[[Any], Any], Callable[[Any], Any], bool]] = {}
        self.handlers: dict[int, Any] = {}
        """The handler object of each protocol version used so far: the latest one's is built with the
        connection (its routes serve until ``initialize``), another one's when negotiation picks it."""
        self.handler: Any = None
        """The handler object of the protocol version in use."""
        self._install(latest)

    @property
    def variants(self) -> dict[int, ModuleType]:
        """The generated variant module of each protocol version this side speaks (``{1: acp_schema.v1, ...}``)."""
        return {version: module for version, (module, _) in sorted(self._versions.items())}

    def _install(self, version: int) -> None:
        """Speak ``version`` from now on: route the methods of its variant to its handler object."""
        self.variant = self._versions[version][0]
        self.protocol_version = version
        if version not in self.handlers:
            self.handlers[version] = _instantiate(self._versions[version][1], self)
        self.handler = self.handlers[version]
        routes = self.connection.routes
        for method in [m for m in routes if not m.startswith("_")]:  # extension routes stay
            del routes[method]
        self._notify_plans.clear()
        self._request_plans.clear()
        for table in (self.variant.REQUESTS, self.variant.NOTIFICATIONS):
            for spec in table.values():
                if spec.side != self.side:
                    continue
                fn = _method(self.handler, spec.attr)
                if fn is not None:
                    self._add_route(spec, fn)
        self._add_own_routes()

    def _add_own_routes(self) -> None:
        """Routes the runtime itself answers (after the handler's: they take precedence)."""

    def _add_route(self, spec: MethodSpec, fn: Callable[[Any], Awaitable[Any]]) -> None:
        self.connection.routes[spec.method] = Route(
            spec.method, spec.kind, fn, params_type=spec.params_type, result_type=spec.result_type
        )

    # -- running ---------------------------------------------------------------------------------
    async def __aenter__(self) -> Any:
        await self.connection.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self.connection.__aexit__(*exc)

    async def wait_closed(self) -> None:
        """Wait until the connection closes (the peer went away or :meth:`aclose` was called)."""
        await self.connection.wait_closed()

    async def serve_until_closed(self) -> None:
        """``async with conn: await conn.wait_closed()`` in the calling task, one task and one
        nursery lighter (see :meth:`Connection.serve_until_closed`): for a server that holds the
        connection until the peer leaves and does nothing else in the meantime."""
        await self.connection.serve_until_closed()

    async def aclose(self) -> None:
        """Close the connection (see :meth:`Connection.aclose`)."""
        await self.connection.aclose()

    @property
    def closed(self) -> bool:
        """True once the connection closed."""
        return self.connection.closed

    def start_soon(self, async_fn: Callable[..., Awaitable[object]], *args: Any, name: str | None = None) -> None:
        """Run ``async_fn(*args)`` in the background for as long as the connection lives (see
        :meth:`Connection.start_soon`): cancelled, and waited for, when the connection closes."""
        self.connection.start_soon(async_fn, *args, name=name)

    # -- Sender ----------------------------------------------------------------------------------
    def _check_call(self, spec: MethodSpec, wire: Any) -> None:
        raise NotImplementedError

    async def send_request(self, spec: MethodSpec, params: Any, *, timeout: float | None = None) -> Any:
        """Send a typed request to the peer (what the generated ``*Peer`` proxies call).

        Raises :class:`acp_trio.CapabilityError` (nothing sent) when the peer did not advertise
        the method, :class:`acp_trio.RequestError`, :class:`acp_trio.RequestTimeout`,
        :class:`acp_trio.ConnectionClosed`, :class:`acp_trio.DecodeError` (a result that does not fit).
        """
        plan = self._request_plans.get(spec.method)  # a str key: hashing a MethodSpec costs more
        if plan is None or plan[0] is not spec:
            plan = self._request_plan(spec)
        wire = plan[1](params)
        self._check_call(spec, wire)
        if plan[3]:
            return await self._request(spec, params, wire, timeout)
        # one coroutine frame less on the common path
        result = await self.connection.request(spec.method, wire, timeout=timeout)
        if result is None:  # null for an empty result: decode_result's rule
            return self.connection.decode_result(spec, result)
        return plan[2](result)

    async def send_requests(
        self, spec: MethodSpec | str, params: Iterable[Any], *, limit: int = 64, timeout: float | None = None
    ) -> list[Any]:
        """Send one typed request per item of ``params``, at most ``limit`` in flight, and return
        their typed results in the order of ``params``: what a nursery with a task per
        :meth:`send_request` does, in one task woken once per read of the connection instead of a
        task woken per response (64 reads in flight: a third fewer instructions per request).

        ``spec``: the method, as its ``MethodSpec`` (``v1.REQUESTS["fs/read_text_file"]``) or its
        wire name, looked up in the negotiated variant.  ``timeout``: seconds for the whole call.
        Every request's capability is checked before the first is sent (:class:`acp_trio.CapabilityError`,
        nothing sent).  When one fails, ``$/cancel_request`` goes out for those still in flight and
        nothing more is sent; raises :class:`acp_trio.RequestError` (the first error response),
        :class:`acp_trio.RequestTimeout`, :class:`acp_trio.ConnectionClosed`,
        :class:`acp_trio.DecodeError` (a result that does not fit).  ``ValueError`` for an unknown
        method, ``limit`` below 1, and for ``initialize`` and the methods that open, load or end a
        session or start a prompt turn (they change the connection's state: send them one at a time).
        See :meth:`Connection.request_many`.
        """
        if isinstance(spec, str):
            found: MethodSpec | None = self.variant.REQUESTS.get(spec)
            if found is None or found.side == self.side:
                version = self.protocol_version
                raise ValueError(f"{spec!r} is not a request this side sends in protocol version {version}")
            method_spec = found
        else:
            method_spec = spec
        plan = self._request_plan(method_spec)
        if plan[3]:
            raise ValueError(
                f"{method_spec.method} changes the connection's state: send it with send_request, one at a time"
            )
        wires = [plan[1](p) for p in params]
        for wire in wires:
            self._check_call(method_spec, wire)
        results = await self.connection.request_many(method_spec.method, wires, limit=limit, timeout=timeout)
        decode = plan[2]
        return [decode(r) if r is not None else self.connection.decode_result(method_spec, r) for r in results]

    def _request_plan(self, spec: MethodSpec) -> tuple[MethodSpec, Callable[[Any], Any], Callable[[Any], Any], bool]:
        """How typed requests of ``spec`` are sent (kept per method until the version changes): the
        spec, its params' encoder, its result's decoder, and whether it goes through :meth:`_request`.
        (:meth:`send_request` looks it up itself first: one call less per request.)"""
        plan = self._request_plans.get(spec.method)  # a str key: hashing a MethodSpec costs more
        if plan is not None and plan[0] is spec:
            return plan
        conv = self.connection.converter
        plan = self._request_plans[spec.method] = (
            spec,
            conv.unstructure_fn(spec.params_type),
            conv.structure_fn(spec.result_type),
            spec.method in self._intercepted,
        )
        return plan

    async def _request(self, spec: MethodSpec, params: Any, wire: Any, timeout: float | None) -> Any:
        """Send an intercepted request; returns the decoded result."""
        result = await self.connection.request(spec.method, wire, timeout=timeout)
        return self.connection.decode_result(spec, result)

    def _session_opened(self, method: str, session_id: Any, params: Any) -> None:
        if type(session_id) is str:
            self.sessions.open(info_from(method, session_id, params))

    async def send_notification(self, spec: MethodSpec, params: Any) -> None:
        """Send a typed notification to the peer.  Raises :class:`acp_trio.ConnectionClosed`."""
        # streamed session/update comes through here thousands of times a turn: one lookup
        plan = self._notify_plans.get(spec.method)  # a str key: hashing a MethodSpec costs more
        if plan is None:
            if self.protocol_version >= 2:  # checked once per method: the plans are reset on negotiation
                _capabilities.check_method_in_version(spec.method, self.variant.METHODS, self.protocol_version)
            plan = self._notify_plans[spec.method] = (
                self.connection.converter.unstructure_fn(spec.params_type),
                self._notification_hook(spec.method) or self._has_notification_rules(spec.method),
                self.connection.notification_queue(spec.method),
            )
        wire = plan[0](params)
        if plan[1]:
            if plan[1] is not True:  # session store hook (acp_trio.session_store): it may send this one itself
                full = plan[1](spec.method, wire)
                if full is not None:
                    if full is True:
                        await self.connection.wait_writable()
                    elif full is not False:  # an awaitable that sends it (after a commit barrier)
                        await full
                    return
            else:
                self._check_call(spec, wire)
                self._before_notification(spec, wire)
        if plan[2](wire):  # connection.queue_notification(spec.method, wire)
            await self.connection.wait_writable()

    def _notification_hook(self, method: str) -> Callable[[str, Any], Any] | None:
        """A callable that sends the notification ``method`` instead (``hook(method, wire)``: ``None``
        when it did not, a bool when it queued it: whether to wait for the writer; or an awaitable
        that sends it when awaited), or ``None``; only for methods without rules."""
        return None

    def _has_notification_rules(self, method: str) -> bool:
        """Whether sending the notification ``method`` needs :meth:`_check_call` or :meth:`_before_notification`."""
        return True

    def _before_notification(self, spec: MethodSpec, wire: Any) -> None:
        pass

    # -- extensions ------------------------------------------------------------------------------
    @staticmethod
    def _check_ext_name(method: str) -> None:
        if not method.startswith("_"):
            raise ValueError(f"extension method names start with '_' (see extensibility.mdx), got {method!r}")

    def on_ext_request(
        self,
        method: str,
        handler: Callable[[Any], Awaitable[Any]],
        *,
        params_type: Any = Any,
        result_type: Any = Any,
    ) -> None:
        """Handle the extension request ``method`` (a name starting with ``_``, kept verbatim).

        ``handler``: ``async (params) -> result``; params are decoded as ``params_type`` (an ACP or
        attrs type, or ``Any`` for plain JSON; a mismatch answers -32602) and the result encoded as
        ``result_type``.  Raise :class:`acp_trio.RequestError` to answer with an error.
        """
        self._check_ext_name(method)
        self.connection.routes[method] = Route(
            method, "request", self._gate(method, handler), params_type=params_type, result_type=result_type
        )

    def on_ext_notification(
        self, method: str, handler: Callable[[Any], Awaitable[None]], *, params_type: Any = Any
    ) -> None:
        """Handle the extension notification ``method`` (starts with ``_``); see :meth:`on_ext_request`."""
        self._check_ext_name(method)
        self.connection.routes[method] = Route(method, "notification", handler, params_type=params_type)

    def _gate(self, method: str, handler: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        return handler

    async def ext_request(
        self,
        method: str,
        params: Any = None,
        *,
        params_type: Any = Any,
        result_type: Any = Any,
        timeout: float | None = None,
    ) -> Any:
        """Send the extension request ``method`` (starts with ``_``) and return its result decoded as ``result_type``.

        Raises what :meth:`send_request` raises; a peer without the extension answers -32601
        (:class:`acp_trio.RequestError` with ``code == -32601``).
        """
        self._check_ext_name(method)
        conv = self.connection.converter
        wire = conv.unstructure_fn(params_type)({} if params is None else params)
        result = await self.connection.request(method, wire, timeout=timeout)
        return conv.structure_fn(result_type)(result)

    async def ext_notification(self, method: str, params: Any = None, *, params_type: Any = Any) -> None:
        """Send the extension notification ``method`` (starts with ``_``)."""
        self._check_ext_name(method)
        wire = self.connection.converter.unstructure_fn(params_type)({} if params is None else params)
        await self.connection.notify(method, wire)


class AgentSideConnection(_Side):
    """The agent's end of an ACP connection.

    ``agent``: the agent object, or a factory that returns it: a class, function, method or
    ``functools.partial``, called with this connection when its signature takes a positional
    argument (``def __init__(self, conn)``: keep ``conn`` to talk to the client) or when Python
    cannot tell (a builtin), and with no argument when it takes none (a class without ``__init__``:
    it answers requests but cannot send ``session/update``).  A first positional parameter with a
    default (``conn=None``, a dataclass field) still gets the connection.  A factory whose
    signature takes neither raises ``TypeError`` here, saying what to write instead.  Or a mapping
    ``{variant: agent}`` (``{v1: V1Agent, v2: V2Agent}``, classes or objects) to serve several
    protocol versions side by side: ``initialize`` picks the requested version when one of them
    speaks it, else the latest, and the connection then routes only that variant's methods to that
    agent (``conn.handler``).  It implements any subset of the variant's ``Agent`` protocol
    (``acp_schema.v1.Agent``): ``async def session_prompt(self, params: v1.PromptRequest) ->
    v1.PromptResponse`` and so on; subclassing the protocol (``class MyAgent(v1.Agent)``) is fine,
    the stubs it inherits count as not implemented.  ``send_stream`` / ``receive_stream``: the byte
    streams to the client.  ``variant``: the generated variant module
    (default ``acp_schema.v1``).  ``tap``, ``max_message_size`` (bytes), ``close_timeout``
    (seconds): see :class:`Connection`.

    Talk to the client with the typed proxy ``v1.ClientPeer(conn)`` (or ``conn.client``).

    What the runtime does for the agent:

    - requests before ``initialize`` are answered -32600; a missing ``initialize`` method gets a
      default answer: the negotiated version, ``loadSession`` when ``session_load`` exists (v1;
      v2: ``capabilities.session`` when ``session_new`` exists), and the agent's name (v1
      ``agentInfo``, v2 ``info``; schema ``$defs/Implementation``, initialization.mdx
      "Implementation Information") from its ``agent_info`` attribute, one line in the class::

          agent_info = v1.Implementation(name="notes-agent", title="Notes", version="0.1.0")

      an ``Implementation`` of either variant or its wire JSON (``{"name": ..., "version": ...,
      "title": ...}``), sent as ``agentInfo`` or ``info`` whichever version is negotiated; without
      it the agent is named after its class, version ``"0"``.  A malformed ``agent_info`` raises
      ``TypeError`` when the agent is built (an agent with its own ``initialize`` names itself there);
    - the protocol version is negotiated (the requested one when supported, else the latest) and
      written into the ``initialize`` response; ``conn.protocol_version`` holds it;
    - ``conn.client_capabilities`` holds the client's capabilities (wire JSON); calling a client
      method they do not cover raises :class:`CapabilityError` without sending anything, and
      ``conn.client_supports(method)`` asks beforehand;
    - each ``session/prompt`` runs in a cancel scope that ``session/cancel`` for its session
      cancels: the turn then answers ``{"stopReason": "cancelled"}``; the agent's own
      ``session_cancel`` handler, if any, is called too.  Requests the turn was awaiting (a
      permission request, a file read) are cancelled with it, and ``$/cancel_request`` is sent
      for them; shield such a call (``with trio.CancelScope(shield=True):``) to await its answer
      anyway, e.g. the client's ``cancelled`` permission outcome.
    """

    side = "agent"

    def __init__(
        self,
        agent: Any,
        send_stream: trio.abc.SendStream,
        receive_stream: trio.abc.ReceiveStream,
        **options: Any,
    ) -> None:
        self.client_capabilities: dict[str, Any] = {}
        # methods whose calls passed the capability rules (see _check_call): a set of its own once one did
        self._allowed: set[str] = _NO_SESSIONS
        self.client_info: dict[str, Any] | None = None
        self.initialized = False
        self._initialize_answer: Any = None  # the wire answer, given again to a repeated initialize
        self._turns: dict[Any, set[trio.CancelScope]] = {}
        self._prompting: dict[Any, int] = {}  # v2: session/prompt handlers running, per session
        self._cancel_requested: set[Any] = _NO_SESSIONS  # v2: session/cancel read while such a handler ran
        # v1: the scopes of prompt turns read but whose task has not started yet, per session
        self._received_turns: dict[Any, deque[trio.CancelScope]] = {}
        self._session_store: Any = None  # session store hook: set by acp_trio.session_store.enable()
        super().__init__(agent, send_stream, receive_stream, **options)

    def _add_own_routes(self) -> None:
        routes = self.connection.routes
        # JSON in and out: the variant that decodes the params is chosen from their protocolVersion
        routes["initialize"] = Route("initialize", "request", self._initialize)
        cancel_spec = self.variant.NOTIFICATIONS.get("session/cancel")
        if cancel_spec is not None:
            # the turn's scopes are cancelled as the notification is read: a response read after it
            # (a permission request answered "cancelled") cannot end the turn as if nothing happened
            routes["session/cancel"] = Route(
                "session/cancel",
                "notification",
                self._session_cancel,
                params_type=cancel_spec.params_type,
                on_receive=self._cancel_turns,
            )
        if self._session_store is not None:  # session store hook: its session/* routes, where the agent has none
            self._session_store.add_routes()

    @property
    def client(self) -> Any:
        """The typed client proxy of the variant (``v1.ClientPeer(self)``)."""
        return self.variant.ClientPeer(self)

    def _add_route(self, spec: MethodSpec, fn: Callable[[Any], Awaitable[Any]]) -> None:
        if spec.method == "session/prompt" and self.protocol_version < 2:
            # a turn cut short by the end of input answers stop reason "cancelled" (prompt-turn.mdx)
            self.connection.routes[spec.method] = Route(
                spec.method,
                "request",
                _Gated(self, spec.method, fn, _TURN),
                params_type=spec.params_type,
                result_type=spec.result_type,
                input_ended_result=self._cancelled_turn_result,
                on_receive=self._turn_received,
            )
            return
        if spec.method == "session/prompt":
            # counted from the moment the request is read, so a session/cancel read with it reaches the turn
            self.connection.routes[spec.method] = Route(
                spec.method,
                "request",
                self._accepting(self._gate(spec.method, fn)),
                params_type=spec.params_type,
                result_type=spec.result_type,
                on_receive=self._prompt_received,
            )
            return
        if spec.kind == "request":
            fn = _Gated(self, spec.method, fn, _TRACKED if spec.method in SESSION_METHODS else _PLAIN)
        super()._add_route(spec, fn)

    def _gate(self, method: str, handler: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        return _Gated(self, method, handler, _PLAIN)

    def _not_initialized(self, method: str) -> RequestError:
        return RequestError(
            INVALID_REQUEST,
            "Connection not initialized",
            {"method": method, "detail": "the client must call initialize first"},
        )

    async def _tracked(self, fn: Callable[[Any], Awaitable[Any]], method: str, params: Any) -> Any:
        """``fn(params)``, then record in :attr:`sessions` the session it opened or ended, once it succeeded."""
        if method in ENDED_BY_REQUEST:  # session-setup.mdx: as if session/cancel had been called
            self._cancel_turns(params)
        result = await fn(params)
        try:  # the handler succeeded: a bookkeeping failure must not turn that into an error
            if method in OPENED_BY_RESPONSE:
                self._session_opened(method, getattr(result, "session_id", None), params)
            elif method in OPENED_BY_REQUEST:
                self._session_opened(method, params.session_id, params)
            else:
                self.sessions.end(params.session_id, method)
        except Exception:
            log.exception("recording the session of a %s answer failed", method)
        return result

    async def _initialize(self, raw: Any) -> Any:
        requested = raw.get("protocolVersion") if type(raw) is dict else None
        if self.initialized:
            # initialization.mdx negotiates once per connection: asking again for the same version
            # gets the same answer (conformance linters probe this); another version cannot be had
            if requested == self.protocol_version and self._initialize_answer is not None:
                return self._initialize_answer
            raise RequestError(
                INVALID_REQUEST,
                "Already initialized",
                {
                    "method": "initialize",
                    "negotiatedVersion": self.protocol_version,
                    "requestedVersion": requested,
                    "detail": f"this connection already speaks protocol version {self.protocol_version}",
                },
            )
        conv = self.connection.converter
        version = requested if requested in self.supported_versions else self.supported_versions[-1]
        if version != self.protocol_version:
            self._install(version)
        spec = self.variant.REQUESTS["initialize"]
        if version != requested and version >= 2 and type(raw) is dict and "info" not in raw:
            # an older client asked: answer with our version anyway, so that it can decide (migration.mdx)
            info = raw.get("clientInfo")
            fallback = {"name": "unknown", "version": "unknown"}
            raw = {**raw, "info": info if type(info) is dict and "name" in info and "version" in info else fallback}
        try:
            params = conv.structure_fn(spec.params_type)({} if raw is None else raw)
        except DecodeError as exc:
            raise RequestError.invalid_params(_decode_error_data(exc)) from None
        caps_obj = params.client_capabilities if version < 2 else params.capabilities
        caps = conv.unstructure(caps_obj) if caps_obj else {}
        self.client_capabilities = caps if type(caps) is dict else {}
        self._allowed = _NO_SESSIONS
        info = params.client_info if version < 2 else params.info
        self.client_info = conv.unstructure(info) if info else None
        user = _method(self.handler, "initialize")
        if user is not None:
            response = await user(params)
        else:
            response = conv.structure_fn(spec.result_type)(self._default_initialize_response(version))
        if version >= 2 and getattr(response, "auth_methods", None):
            missing = [m for m in ("auth_login", "auth_logout") if _method(self.handler, m) is None]
            if missing:  # authentication.mdx: an agent with authMethods MUST implement both
                log.warning(
                    "the initialize response lists authMethods but the agent has no %s: clients get -32601",
                    " or ".join(missing),
                )
        if self._session_store is not None:  # session store hook: advertise loadSession and sessionCapabilities
            self._session_store.advertise(response)
        if response.protocol_version != version:
            log.warning(
                "initialize handler answered protocolVersion %r; the negotiated version is %r (sent instead)",
                response.protocol_version,
                version,
            )
            response.protocol_version = version
        self.initialized = True
        self._initialize_answer = conv.unstructure(response)
        return self._initialize_answer

    def _default_initialize_response(self, version: int) -> dict[str, Any]:
        """What ``initialize`` answers when the agent has no ``initialize`` method (wire JSON)."""

        def has(attr: str) -> bool:
            return _method(self.handler, attr) is not None

        if version < 2:
            caps: dict[str, Any] = {"loadSession": True} if has("session_load") else {}
            return {"protocolVersion": version, "agentCapabilities": caps, "agentInfo": self._agent_info()}
        return {
            "protocolVersion": version,
            "info": self._agent_info(),
            "capabilities": {"session": {}} if has("session_new") else {},
        }

    def _install(self, version: int) -> None:
        super()._install(version)
        if _method(self.handler, "initialize") is None:
            self._agent_info()  # a malformed agent_info fails here, when the agent is built, not at initialize

    def _agent_info(self) -> dict[str, Any]:
        """The ``Implementation`` (wire JSON) of the default ``initialize`` answer: the agent's
        ``agent_info`` attribute, else its class name with version ``"0"``.  Raises ``TypeError``
        when ``agent_info`` is not an ``Implementation`` or its wire JSON."""
        handler = self.handler
        info = getattr(handler, "agent_info", None)
        if info is None:
            return {"name": type(handler).__name__, "version": "0"}
        wire: Any = None
        if isinstance(info, Mapping):
            wire = dict(info)
        elif is_acp_class(type(info)):
            wire = self.connection.converter.unstructure(info)
        if not (isinstance(wire, dict) and isinstance(wire.get("name"), str) and isinstance(wire.get("version"), str)):
            raise TypeError(
                f"{type(handler).__name__}.agent_info names the agent in the default initialize answer: give an "
                "Implementation (acp_schema.v1 or v2) or its wire JSON with string 'name' and 'version', e.g. "
                f"agent_info = v1.Implementation(name='my-agent', version='0.1.0'); got {info!r}"
            )
        return wire

    # -- v2 prompt lifecycle ---------------------------------------------------------------------
    def start_turn(self, session_id: str, turn: Callable[[], Awaitable[Any]]) -> None:
        """Protocol version 2: run a prompt's foreground work in the background (prompt-lifecycle.mdx).

        Call it from ``session_prompt`` before returning the acceptance receipt, after sending the
        ``user_message`` update (the spec puts it before ``running``).  It sends ``state_update``
        ``running``, runs ``await turn()`` in a cancel scope that ``session/cancel`` (or
        ``session/close``) for ``session_id`` cancels, then sends ``state_update`` ``idle`` with
        ``turn()``'s return value as the stop reason (``"end_turn"`` when it returns ``None``),
        ``"cancelled"`` when it was cancelled (also by a ``session/cancel`` that arrived while
        ``session_prompt`` was still running), or ``"error"``: with the error's code, message and
        data when ``turn()`` raised :class:`RequestError` (as a v1 prompt answer would carry it),
        else with a -32603 error (the traceback is logged).  Raises :class:`ConnectionClosed` when the
        connection closed; ``RuntimeError`` on a version 1 connection (there the ``session/prompt``
        response ends the turn).  ``turn()`` may return a ``dict`` instead of a stop reason: the
        ``idle`` update's fields (``stopReason``, ``_meta``).
        """
        if self.protocol_version < 2:
            raise RuntimeError(
                "start_turn needs protocol version 2: in version 1 the session/prompt response ends the turn"
            )
        scope = trio.CancelScope()  # registered now, so a session/cancel read from here on reaches it
        if session_id in self._cancel_requested:
            self._cancel_requested.discard(session_id)
            scope.cancel()
        self._turns.setdefault(session_id, set()).add(scope)
        try:
            self.connection.start_soon(self._run_turn, session_id, turn, scope, name=f"turn {session_id}")
        except BaseException:
            self._turns[session_id].discard(scope)
            raise

    def _accepting(self, fn: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        """v2 ``session/prompt``: notes that the session is accepting a prompt, so that a
        ``session/cancel`` read meanwhile cancels the turn the handler then starts."""

        async def accept(params: Any) -> Any:
            session_id = params.session_id  # counted in _prompt_received, when the request was read
            try:
                return await fn(params)
            finally:
                left = self._prompting[session_id] - 1
                if left:
                    self._prompting[session_id] = left
                else:
                    del self._prompting[session_id]
                    self._cancel_requested.discard(session_id)

        return accept

    def _prompt_received(self, params: Any) -> None:
        self._prompting[params.session_id] = self._prompting.get(params.session_id, 0) + 1

    async def _run_turn(self, session_id: str, turn: Callable[[], Awaitable[Any]], scope: trio.CancelScope) -> None:
        spec = self.variant.NOTIFICATIONS["session/update"]
        conv = self.connection.converter

        async def state(update: dict[str, Any]) -> None:
            params = conv.structure_fn(spec.params_type)({"sessionId": session_id, "update": update})
            await self.send_notification(spec, params)

        try:
            await state({"sessionUpdate": "state_update", "state": "running"})
        except ConnectionClosed:  # nobody to run the turn for: drop the scope start_turn registered
            scopes = self._turns.get(session_id)
            if scopes is not None:
                scopes.discard(scope)
                if not scopes:
                    del self._turns[session_id]
            return
        idle: dict[str, Any] = {"sessionUpdate": "state_update", "state": "idle", "stopReason": "cancelled"}
        try:
            done, stop_reason = await _in_session_scope(self._turns, session_id, turn(), scope)
            if done and isinstance(stop_reason, dict):  # the idle's fields: stopReason, _meta
                idle.update(stop_reason)
                idle["stopReason"] = stop_reason.get("stopReason") or "end_turn"
            elif done:
                idle["stopReason"] = stop_reason or "end_turn"
        except RequestError as exc:  # the turn's own error, as a v1 prompt answer would carry it
            log.info("prompt turn of session %r ended with %s", session_id, exc)
            idle["stopReason"] = "error"
            idle["error"] = exc.to_wire()
        except Exception:
            log.exception("prompt turn of session %r raised", session_id)
            idle["stopReason"] = "error"
            idle["error"] = {"code": INTERNAL_ERROR, "message": "Internal error"}
        finally:  # also when the connection cancels the task (end of input): the client hears why
            with trio.CancelScope(shield=True):
                try:
                    await state(idle)
                except ConnectionClosed:
                    pass

    async def _prompt_turn(self, fn: Callable[[Any], Awaitable[Any]], params: Any) -> Any:
        """A v1 ``session/prompt``: ``fn(params)`` in the turn's scope (registered as the request was
        read, see :meth:`_turn_received`); ``{"stopReason": "cancelled"}`` when ``session/cancel`` cancelled it."""
        received = self._received_turns.get(params.session_id)
        scope = received.popleft() if received else None
        if received is not None and not received:
            del self._received_turns[params.session_id]
        call = self._initialized_call(fn, params)
        done, result = await _in_session_scope(self._turns, params.session_id, call, scope)
        if done:
            return result
        log.debug("prompt turn of session %r cancelled by session/cancel", params.session_id)
        return self._cancelled_turn_result()

    async def _initialized_call(self, fn: Callable[[Any], Awaitable[Any]], params: Any) -> Any:
        if not self.initialized:
            raise self._not_initialized("session/prompt")
        return await fn(params)

    def _cancelled_turn_result(self) -> Any:
        """The v1 ``session/prompt`` result of a cancelled turn (stop reason ``cancelled``)."""
        spec = self.variant.REQUESTS["session/prompt"]
        return self.connection.converter.structure_fn(spec.result_type)({"stopReason": "cancelled"})

    def _turn_received(self, params: Any) -> None:
        """A v1 ``session/prompt`` was read: its turn's scope is registered now, so a
        ``session/cancel`` read right after it (even in the same read, before the turn's task
        runs) cancels it."""
        scope = trio.CancelScope()
        self._turns.setdefault(params.session_id, set()).add(scope)
        self._received_turns.setdefault(params.session_id, deque()).append(scope)

    def _cancel_turns(self, params: Any) -> None:
        for scope in list(self._turns.get(params.session_id, ())):
            scope.cancel()
        if params.session_id in self._prompting:
            if self._cancel_requested is _NO_SESSIONS:
                self._cancel_requested = set()
            self._cancel_requested.add(params.session_id)

    async def _session_cancel(self, params: Any) -> None:
        user = _method(self.handler, "session_cancel")
        if user is not None:
            await user(params)

    def client_supports(self, method: str, params: Any = None) -> bool:
        """Whether the client advertised what calling ``method`` needs (``initialization.mdx``,
        client capabilities): the rule this connection applies to every call, which raises
        :class:`CapabilityError` and sends nothing when it fails.  ``params``: the call's wire JSON,
        for the methods whose rule depends on them (``elicitation/create`` and its ``mode``).
        ``True`` for a method without a rule; before ``initialize``, judged on no capabilities."""
        try:
            if self.protocol_version >= 2:
                _capabilities.check_client_call_v2(method, params, self.client_capabilities)
            else:
                _capabilities.check_client_call(method, params, self.client_capabilities)
        except _capabilities.CapabilityError:
            return False
        return True

    def _check_call(self, spec: MethodSpec, wire: Any) -> None:
        method = spec.method
        if method in self._allowed:  # allowed before, and its verdict depends on the method only
            return
        if self.protocol_version >= 2:
            _capabilities.check_method_in_version(method, self.variant.METHODS, self.protocol_version)
            _capabilities.check_client_call_v2(method, wire, self.client_capabilities)
        else:
            _capabilities.check_client_call(method, wire, self.client_capabilities)
        # the verdict holds until initialize (the version and the client's capabilities) changes it,
        # except where it depends on the params too
        if method not in _capabilities.CLIENT_PARAM_RULE_METHODS:
            if self._allowed is _NO_SESSIONS:
                self._allowed = set()
            self._allowed.add(method)

    def _has_notification_rules(self, method: str) -> bool:
        if self.protocol_version >= 2:
            return _capabilities.client_rules_apply_v2(method)
        return method in _capabilities.CLIENT_METHOD_RULES

    def _notification_hook(self, method: str) -> Callable[[str, Any], Any] | None:
        if self._session_store is None or self._has_notification_rules(method):
            return None
        hook: Callable[[str, Any], Any] | None = self._session_store.notification_hook(method)
        return hook  # session store hook: records session/update of its sessions


class ClientSideConnection(_Side):
    """The client's end of an ACP connection.

    ``client``: the client object, or a factory that returns it, called with this connection or,
    when its signature takes no positional argument, with none (as the agent factory of
    :class:`AgentSideConnection`; ``TypeError`` when it takes neither); or a mapping
    ``{variant: client}`` for several protocol versions (send ``initialize`` with
    :meth:`initialize`: the connection continues in whichever of them the agent answers).  It
    implements any subset of the variant's ``Client`` protocol (``acp_schema.v1.Client``):
    ``session_update``, ``session_request_permission``, ``fs_read_text_file`` and so on
    (subclassing it is fine: the stubs it inherits count as not implemented).  Other arguments as
    for :class:`AgentSideConnection`.

    Talk to the agent with ``v1.AgentPeer(conn)`` (or ``conn.agent``).  What the runtime does:

    - the ``initialize`` answer is checked: a protocol version this client does not speak closes
      the connection and raises :class:`ProtocolVersionError`; ``conn.agent_capabilities`` then
      holds the agent's capabilities (wire JSON), and calls they do not cover (``session/load``
      without ``loadSession``, an image block without ``promptCapabilities.image``, an ``http``
      MCP server without ``mcpCapabilities.http``, ...) raise :class:`CapabilityError` unsent;
    - ``session/update`` notifications of one session are handled one at a time in arrival order;
      ``session/request_permission`` starts only after its session's earlier updates were handled
      (other requests such as ``fs/read_text_file`` run at once, concurrently), and a response is
      returned only after the updates that preceded it were handled;
    - after this client sends ``session/cancel``, every pending and new
      ``session/request_permission`` of that session is answered ``cancelled``, and every
      session-scoped ``elicitation/create`` of it ``{"action": "cancel"}``, until the session's
      turn ends (v1: its ``session/prompt`` returns; v2: its ``idle`` state update); so are they
      on ``session/close`` and ``session/delete``.  Elicitations too start only after their
      session's earlier updates were handled, and ``elicitation/complete`` notifications are
      handled in arrival order, before a response that follows them.
    """

    side = "client"
    _intercepted = frozenset({"initialize", "session/prompt"}) | SESSION_METHODS

    def __init__(
        self,
        client: Any,
        send_stream: trio.abc.SendStream,
        receive_stream: trio.abc.ReceiveStream,
        **options: Any,
    ) -> None:
        self.agent_capabilities: dict[str, Any] = {}
        self.agent_auth_methods: list[Any] = []
        self.initialize_response: Any = None
        self._cancelling: dict[Any, int] = {}
        self._prompts: dict[Any, int] = {}
        super().__init__(client, send_stream, receive_stream, **options)

    @property
    def agent(self) -> Any:
        """The typed agent proxy of the variant (``v1.AgentPeer(self)``)."""
        return self.variant.AgentPeer(self)

    def _add_route(self, spec: MethodSpec, fn: Callable[[Any], Awaitable[Any]]) -> None:
        if spec.method == "session/update":
            if self.protocol_version >= 2:
                fn = self._watching_idle(fn)
            self.connection.routes[spec.method] = Route(
                spec.method,
                "notification",
                fn,
                params_type=spec.params_type,
                serial_key=_session_key,
            )
            return
        if spec.method == "elicitation/complete":
            # handled in arrival order, and before a response read after it reaches its caller: a
            # prompt that returns after the agent reported a URL elicitation complete sees it complete
            self.connection.routes[spec.method] = Route(
                spec.method, "notification", fn, params_type=spec.params_type, serial_key=_elicitation_key
            )
            return
        if spec.method in _TURN_QUESTIONS:
            # it starts after its session's earlier updates were handled, so it never overtakes the
            # tool_call update it refers to; fs/* and terminal/* requests do not wait
            structure = self.connection.converter.structure_fn(spec.result_type)
            answer, on_cancel_request = _TURN_QUESTIONS[spec.method]

            def cancelled() -> Any:
                return structure(answer)

            self.connection.routes[spec.method] = Route(
                spec.method,
                "request",
                self._permission(fn, spec, answer),
                params_type=spec.params_type,
                result_type=spec.result_type,
                serial_key=_question_key,
                # v2 schema (RequestPermissionOutcome): a request the agent withdraws with
                # $/cancel_request is answered with the "cancelled" outcome, not -32800
                cancelled_result=cancelled if self.protocol_version >= 2 and on_cancel_request else None,
                input_ended_result=cancelled,
                # cancelling its session's turn answers it "cancelled" (_cancel_permissions)
                cancel_group=_question_group,
                group_cancelled_result=cancelled,
            )
            return
        super()._add_route(spec, fn)

    def _permission(
        self, fn: Callable[[Any], Awaitable[Any]], spec: MethodSpec, answer: Any
    ) -> Callable[[Any], Awaitable[Any]]:
        """``fn`` for a question of :data:`_TURN_QUESTIONS`, answered ``answer`` at once when its
        session's turn is being cancelled.  One that comes earlier is in its session's cancel group
        (:func:`_question_group`): :meth:`_cancel_permissions` answers it ``answer`` then."""
        structure_result = self.connection.converter.structure_fn(spec.result_type)

        async def ask(params: Any) -> Any:
            session_id = getattr(params, "session_id", None)
            if type(session_id) is str and session_id in self._cancelling:
                return structure_result(answer)
            return await fn(params)

        return ask

    def _watching_idle(self, fn: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
        """v2: a ``state_update`` ``idle`` ends the session's cancellation (permission requests are
        answered normally again); the update then goes to ``fn``."""
        idle_type = getattr(self.variant, "IdleStateUpdateSessionUpdate", None)

        async def watched(params: Any) -> Any:
            if self._cancelling and idle_type is not None and isinstance(params.update, idle_type):
                self._cancelling.pop(params.session_id, None)
            return await fn(params)

        return watched

    def _check_call(self, spec: MethodSpec, wire: Any) -> None:
        if spec.method == "initialize":
            return
        if self.protocol_version < 2:
            _capabilities.check_agent_call(spec.method, wire, self.agent_capabilities)
            return
        _capabilities.check_method_in_version(spec.method, self.variant.METHODS, self.protocol_version)
        _capabilities.check_agent_call_v2(spec.method, wire, self.agent_capabilities, self.agent_auth_methods)

    async def initialize(self, *requests: Any, timeout: float | None = None) -> Any:
        """Send ``initialize`` built from one ``InitializeRequest`` per protocol version this client speaks.

        ``requests``: typed requests of different variants (``v2.InitializeRequest(...)``,
        ``v1.InitializeRequest(...)``).  Their wire fields are merged (v1's ``clientCapabilities``
        and ``clientInfo`` next to v2's ``capabilities`` and ``info``; the highest
        ``protocolVersion`` is sent), so an agent that answers with an older version read the
        capabilities meant for it.  Returns the agent's ``InitializeResponse`` in the negotiated
        version's variant (``conn.protocol_version`` says which).  ``timeout``: seconds.  Raises
        :class:`ProtocolVersionError` (connection closed) when the agent answers a version this
        client was not given a handler for, and what :meth:`send_request` raises.
        """
        if not requests:
            raise TypeError("initialize() needs at least one InitializeRequest")
        conv = self.connection.converter
        wires = sorted((conv.unstructure(r) for r in requests), key=lambda w: w.get("protocolVersion", 0))
        merged: dict[str, Any] = {}
        for wire in wires:
            merged.update(wire)
        return await self._initialize(merged, timeout)

    async def _request(self, spec: MethodSpec, params: Any, wire: Any, timeout: float | None) -> Any:
        if spec.method == "initialize":
            return await self._initialize(wire, timeout)
        if spec.method in SESSION_METHODS:
            if spec.method in ENDED_BY_REQUEST:  # the agent cancels the session's work (session-setup.mdx)
                self._cancel_permissions(params.session_id)
            result = await self.connection.request(spec.method, wire, timeout=timeout)
            if spec.method in OPENED_BY_RESPONSE:
                self._session_opened(spec.method, result.get("sessionId") if type(result) is dict else None, params)
            elif spec.method in OPENED_BY_REQUEST:
                self._session_opened(spec.method, params.session_id, params)
            elif spec.method in ENDED_BY_REQUEST:
                self.sessions.end(params.session_id, spec.method)
            return self.connection.decode_result(spec, result)
        if spec.method != "session/prompt" or type(wire) is not dict:
            return self.connection.decode_result(
                spec, await self.connection.request(spec.method, wire, timeout=timeout)
            )
        session_id = wire.get("sessionId")
        if self.protocol_version >= 2:  # a new prompt: whatever was being cancelled has ended
            self._cancelling.pop(session_id, None)
        self._prompts[session_id] = self._prompts.get(session_id, 0) + 1
        try:
            result = await self.connection.request(spec.method, wire, timeout=timeout)
        finally:
            left = self._prompts[session_id] - 1
            if left:
                self._prompts[session_id] = left
            else:
                del self._prompts[session_id]
                if self.protocol_version < 2:  # v1: the response ends the turn; v2: state_update idle does
                    self._cancelling.pop(session_id, None)
        return self.connection.decode_result(spec, result)

    async def _initialize(self, wire: Any, timeout: float | None) -> Any:
        result = await self.connection.request("initialize", wire, timeout=timeout)
        answered = result.get("protocolVersion") if type(result) is dict else None
        if answered not in self.supported_versions:
            requested = wire.get("protocolVersion") if type(wire) is dict else None
            error = ProtocolVersionError(requested, answered, self.supported_versions)
            log.debug("%s", error)  # raised to the caller, who reports it: logged louder, it said it twice
            await self.connection.aclose(str(error))
            raise error
        assert type(result) is dict
        if answered != self.protocol_version:
            self._install(answered)
        caps = result.get("agentCapabilities" if answered < 2 else "capabilities")
        self.agent_capabilities = caps if type(caps) is dict else {}
        methods = result.get("authMethods")
        self.agent_auth_methods = methods if type(methods) is list else []
        self.initialize_response = result
        spec = self.variant.REQUESTS["initialize"]
        return self.connection.decode_result(spec, result)

    def _before_notification(self, spec: MethodSpec, wire: Any) -> None:
        if spec.method == "session/cancel" and type(wire) is dict:
            session_id = wire.get("sessionId")
            if session_id in self._prompts or self.protocol_version >= 2:
                self._cancelling[session_id] = 1
            self._cancel_permissions(session_id)

    def _cancel_permissions(self, session_id: Any) -> None:
        """Answer the session's pending ``session/request_permission`` requests ``cancelled`` (and its
        ``elicitation/create`` requests ``cancel``: every question of :data:`_TURN_QUESTIONS`)."""
        self.connection.cancel_group(_questions(session_id))


_PLAIN: Final = 0
_TRACKED: Final = 1
_TURN: Final = 2


class _Gated:
    """The handler of an agent's request route: ``-32600`` until ``initialize`` went through, then
    ``fn(params)``; with ``mode`` :data:`_TRACKED` (the session methods) recording the session it
    opened or ended (:meth:`AgentSideConnection._tracked`), with :data:`_TURN` (v1 ``session/prompt``)
    as the session's prompt turn (:meth:`AgentSideConnection._prompt_turn`).  One object per route,
    where closures were a function, a tuple and a cell per variable each: a server builds these for
    every connection it opens, and the garbage collector visits them as long as it is open."""

    __slots__ = ("conn", "fn", "method", "mode")

    def __init__(self, conn: AgentSideConnection, method: str, fn: Callable[[Any], Awaitable[Any]], mode: int) -> None:
        self.conn = conn
        self.method = method
        self.fn = fn
        self.mode = mode

    async def __call__(self, params: Any) -> Any:
        conn = self.conn
        if self.mode == _TURN:  # (the scope registered when it was read is taken first, initialized or not)
            return await conn._prompt_turn(self.fn, params)
        if not conn.initialized:
            raise conn._not_initialized(self.method)
        if self.mode == _TRACKED:
            return await conn._tracked(self.fn, self.method, params)
        return await self.fn(params)


async def _in_session_scope(
    registry: dict[Any, set[trio.CancelScope]],
    session_id: Any,
    call: Awaitable[Any],
    scope: trio.CancelScope | None = None,
) -> tuple[bool, Any]:
    """Await ``call`` in a cancel scope registered under ``session_id``: ``(True, result)``, or
    ``(False, None)`` when something cancelled that scope (``session/cancel``), even if ``call``
    finished before the cancellation reached it.  ``scope``: one to use (default a new one)."""
    if scope is None:
        scope = trio.CancelScope()
    scopes = registry.setdefault(session_id, set())
    scopes.add(scope)
    try:
        with scope:
            result = await call
        if not scope.cancel_called:
            return True, result
    finally:
        scopes.discard(scope)
        if not scopes:
            registry.pop(session_id, None)
    return False, None


# Requests a client answers for its user during a session's turn, with the answer (wire JSON) the runtime
# gives when the turn is cancelled (session/cancel sent, session/close or delete) or the input ended, and
# whether a v2 $/cancel_request gets that answer too instead of -32800.  Spec: prompt-turn.mdx and v2
# prompt-lifecycle.mdx (Cancellation: pending permission requests MUST be answered "cancelled");
# elicitation.mdx (Responses: "cancel", the user dismissed it without choosing: no question outlives its turn).
_TURN_QUESTIONS: dict[str, tuple[dict[str, Any], bool]] = {
    "session/request_permission": ({"outcome": {"outcome": "cancelled"}}, True),
    "elicitation/create": ({"action": "cancel"}, False),
}


def _elicitation_key(params: Any) -> Any:
    """The ordering key of ``elicitation/complete`` (no session: one queue for all of them)."""
    return "elicitation/complete"


def _questions(session_id: Any) -> Any:
    """The cancel group (see :class:`Route`) of the questions of a session's turn."""
    return ("questions", session_id)


def _question_group(params: Any) -> Any:
    """The cancel group of a question of :data:`_TURN_QUESTIONS`: its session's (:func:`_question_key`),
    cancelled together with the session's turn; none without a session."""
    session_id = _question_key(params)
    return None if session_id is None else _questions(session_id)


def _question_key(params: Any) -> Any:
    """The ordering key of a question of :data:`_TURN_QUESTIONS`: its session, if it has one."""
    session_id = getattr(params, "session_id", None)
    return session_id if type(session_id) is str else None


_session_key = operator.attrgetter("session_id")
"""The ordering key of ``session/update``: the notification's session id."""


__all__ = ["AgentSideConnection", "ClientSideConnection", "ConnectionClosed", "ProtocolVersionError"]
