"""Schema JSON -> normalised schema JSON + ``codegen.ir.Model``; every rewrite asserts its input.

Contract: ``preprocess(schema, variant, sha256, stable)`` returns ``(normalised, model)``.

* The JSON-RPC envelope ``$defs`` (``x-docs-ignore``) and the root ``anyOf`` are dropped, after
  checking they are what we expect.
* Each union-shaped ``$def`` is classified: string/integer enum (``Literal`` alias, open when the
  schema has a catch-all), primitive union, or object union.  Every tagged branch of an object
  union becomes a struct named ``<Tag><Union>`` that carries its tag field first; every catch-all
  becomes ``<Union>Other``; tagged unions the schema leaves closed get a synthesised catch-all so
  a newer peer's variant is kept, never lost.  Branches that point at another union are expanded
  (nested tags), struct + ``anyOf`` "property bag" shapes are merged, and the one struct whose tag
  may be ``null`` (``IdleStateUpdate``) is flattened to a plain struct with an enum field.
* The normalised schema holds only plain structs and simple type schemas, which
  datamodel-code-generator turns into models with predictable names (checked in ``codegen.dcg``).

Any shape this module does not recognise raises ``SchemaShapeError`` naming the JSON pointer: an
upstream change must fail loudly, not generate something subtly different.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from . import naming
from .ir import NO_DEFAULT, Alias, Enum, Method, Model, Prop, Struct, Union

ENVELOPE_DEFS = (
    "AgentRequest",
    "AgentResponse",
    "AgentNotification",
    "ClientRequest",
    "ClientResponse",
    "ClientNotification",
    "ProxyRequest",
    "ProxyResponse",
    "ProxyNotification",
)
ROOT_ANYOF_TITLES = {"Agent", "Client", "ProtocolLevel", "Proxy"}
PRIMITIVES = {"string", "integer", "number", "boolean", "null", "array", "object"}


class SchemaShapeError(RuntimeError):
    """The upstream schema no longer has the shape a rewrite expects."""


def expect(cond: bool, pointer: str, what: str) -> None:
    if not cond:
        raise SchemaShapeError(f"{pointer}: expected {what}")


def pascal(tag: str) -> str:
    parts = [p for p in re.split(r"[^0-9A-Za-z]+", tag) if p]
    out = "".join(p[:1].upper() + p[1:] for p in parts)
    expect(bool(out), f"tag {tag!r}", "a tag that yields a class name")
    return out


def ref_name(schema: dict[str, Any]) -> str | None:
    ref = schema.get("$ref")
    if ref is None:
        return None
    expect(ref.startswith("#/$defs/"), ref, "a local $defs reference")
    return str(ref[len("#/$defs/") :])


def single_ref(schema: dict[str, Any]) -> str | None:
    """`{"allOf": [{"$ref": X}]}` or `{"$ref": X}` -> X."""
    if "$ref" in schema:
        return ref_name(schema)
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return ref_name(all_of[0])
    return None


def is_unstable(description: str | None) -> bool:
    return bool(description) and "**UNSTABLE**" in (description or "")


class _Pre:
    def __init__(self, schema: dict[str, Any], variant: str, sha256: str, stable: dict[str, Any] | None):
        self.src = schema
        self.defs: dict[str, Any] = copy.deepcopy(schema["$defs"])
        self.variant = variant
        self.stable_defs: set[str] | None = set(stable["$defs"]) if stable else None
        self.stable_methods: set[str] | None = (
            {d["x-method"] for d in stable["$defs"].values() if "x-method" in d} if stable else None
        )
        self.model = Model(variant=variant, sha256=sha256, protocol_version=self._protocol_version())
        self.out_defs: dict[str, Any] = {}
        self.union_cache: dict[str, list[Struct]] = {}

    # -- top level -----------------------------------------------------------------------------
    def _protocol_version(self) -> int:
        m = re.fullmatch(r"v(\d+)(_unstable)?", self.variant)
        expect(m is not None, self.variant, "a variant name like v1 or v2_unstable")
        assert m is not None
        return int(m.group(1))

    def run(self) -> tuple[dict[str, Any], Model]:
        root_titles = {b.get("title") for b in self.src.get("anyOf", [])}
        expect(root_titles <= ROOT_ANYOF_TITLES and bool(root_titles), "/anyOf", f"titles within {ROOT_ANYOF_TITLES}")
        for name in ENVELOPE_DEFS:
            if name in self.defs:
                expect(self.defs[name].get("x-docs-ignore") is True, f"/$defs/{name}", "x-docs-ignore: true")
                del self.defs[name]
        leftovers = [n for n, d in self.defs.items() if d.get("x-docs-ignore")]
        expect(not leftovers, "/$defs", f"no other x-docs-ignore defs, found {leftovers}")
        self.refcount = self._count_refs()
        # object unions first: a branch may claim the name of the struct it wraps (`IdleStateUpdate`)
        first = [n for n, d in self.defs.items() if (d.get("oneOf") or d.get("anyOf")) and self.is_object_union(n)]
        for name in first:
            self.convert_def(name, self.defs[name])
        for name, d in self.defs.items():
            if name not in first:
                self.convert_def(name, d)
        self.collect_methods()
        normalised = {
            "$schema": self.src.get("$schema"),
            "title": f"ACP {self.variant}",
            "$defs": self.out_defs,
        }
        return normalised, self.model

    def _count_refs(self) -> dict[str, int]:
        counts: dict[str, int] = {}

        def walk(x: Any) -> None:
            if isinstance(x, dict):
                r = x.get("$ref")
                if isinstance(r, str):
                    n = r.rsplit("/", 1)[-1]
                    counts[n] = counts.get(n, 0) + 1
                for v in x.values():
                    walk(v)
            elif isinstance(x, list):
                for v in x:
                    walk(v)

        walk(self.defs)
        return counts

    def unstable(self, name: str, description: str | None) -> bool:
        if is_unstable(description):
            return True
        return self.stable_defs is not None and name not in self.stable_defs

    def add_name(self, name: str) -> None:
        expect(name not in self.model.order, f"/$defs/{name}", "a name used once")
        self.model.order.append(name)

    # -- classification ------------------------------------------------------------------------
    def convert_def(self, name: str, d: dict[str, Any]) -> None:
        ptr = f"/$defs/{name}"
        branches = d.get("oneOf") or d.get("anyOf")
        expect(not ("oneOf" in d and "anyOf" in d), ptr, "only one of oneOf/anyOf")
        desc = d.get("description")
        if branches is None:
            if d.get("type") == "object" or "properties" in d:
                self.emit_struct(self.plain_struct(name, d, ptr))
            else:
                self.emit_alias(name, desc, self.clean_value_schema(d, ptr))
            return
        if self.is_enum(branches):
            self.emit_enum(name, desc, branches, ptr)
            return
        if all(self.is_primitive_branch(b) for b in branches) and "properties" not in d:
            members = [self.clean_value_schema(b, f"{ptr}/anyOf") for b in branches]
            self.emit_union(name, desc, members)
            return
        # object unions, possibly with base properties
        if self.is_bag_union(d):
            self.emit_struct(self.merged_bag_struct(name, d, ptr))
            return
        if self.is_nullable_tag_union(d):
            self.emit_struct(self.flattened_enum_struct(name, d, ptr))
            return
        variants = self.union_variants(name)
        member_names: list[str] = []
        for st in variants:
            if st.name in self.model.structs or st.name in self.out_defs:
                member_names.append(st.name)
                continue
            self.emit_struct(st)
            member_names.append(st.name)
        self.emit_union(name, desc, [{"$ref": f"#/$defs/{m}"} for m in member_names])

    def is_enum(self, branches: list[dict[str, Any]]) -> bool:
        kinds = set()
        for b in branches:
            if "const" in b and b.get("type") in ("string", "integer"):
                kinds.add(b["type"])
            elif b.get("title") in naming.CATCHALL_TITLES and b.get("type") in ("string", "integer") and len(b) <= 4:
                kinds.add(b["type"])
            else:
                return False
        return len(kinds) == 1 and any("const" in b for b in branches)

    def is_primitive_branch(self, b: dict[str, Any]) -> bool:
        """A member of an untagged union: a primitive schema, an unconstrained `{}`, or a bare `$ref`."""
        if "properties" in b or "const" in b:
            return False
        if "allOf" in b or "$ref" in b:
            return single_ref(b) is not None
        t = b.get("type")
        return t is None or t in PRIMITIVES - {"object"}

    def is_bag_union(self, d: dict[str, Any]) -> bool:
        """`struct + anyOf` whose branches are untagged property bags (elicitation scopes)."""
        branches = d.get("oneOf") or d.get("anyOf") or []
        if "properties" not in d:
            return False
        for b in branches:
            r = single_ref(b)
            if r is None or "properties" in b or b.get("title") not in ("Session", "Request"):
                return False
        return True

    def is_nullable_tag_union(self, d: dict[str, Any]) -> bool:
        branches = d.get("oneOf") or d.get("anyOf") or []
        return "properties" in d and any(
            b.get("title") == "none" and any(p == {"type": "null"} for p in b.get("properties", {}).values())
            for b in branches
        )

    # -- value schemas -------------------------------------------------------------------------
    def clean_value_schema(self, s: dict[str, Any], ptr: str) -> dict[str, Any]:
        """A property/alias schema with titles dropped and `allOf: [$ref]` collapsed."""
        s = copy.deepcopy(s)
        s.pop("title", None)
        r = single_ref(s)
        if r is not None and "allOf" in s:
            s.pop("allOf")
            s["$ref"] = f"#/$defs/{r}"
        for key in ("anyOf", "oneOf"):
            if key in s:
                s[key] = [self.clean_value_schema(b, ptr) for b in s[key]]
        if "items" in s and isinstance(s["items"], dict):
            s["items"] = self.clean_value_schema(s["items"], ptr)
        return s

    def split_null(self, s: dict[str, Any], ptr: str) -> tuple[dict[str, Any], bool]:
        """Remove `null` from a property schema; return (schema, nullable)."""
        s = self.clean_value_schema(s, ptr)
        t = s.get("type")
        if isinstance(t, list):
            nullable = "null" in t
            rest = [x for x in t if x != "null"]
            expect(len(rest) == 1, ptr, "one non-null type")
            s["type"] = rest[0]
            return s, nullable
        for key in ("anyOf", "oneOf"):
            if key in s:
                members = s[key]
                nulls = [m for m in members if m == {"type": "null"}]
                if nulls:
                    rest = [m for m in members if m != {"type": "null"}]
                    if len(rest) == 1:
                        merged = {k: v for k, v in s.items() if k != key}
                        merged.update(rest[0])
                        return merged, True
                    s[key] = rest
                    return s, True
        if t == "null":
            return s, True
        return s, False

    def make_prop(self, wire: str, ps: dict[str, Any], required: bool, ptr: str) -> Prop:
        schema, nullable = self.split_null(ps, f"{ptr}/properties/{wire}")
        desc = schema.pop("description", None)
        default = schema.pop("default", NO_DEFAULT)
        flags = {k: schema.pop(k, False) for k in list(schema) if k.startswith("x-deserialize-")}
        known = {"x-deserialize-default-on-error", "x-deserialize-skip-invalid-items", "x-deserialize-default-on-null"}
        expect(set(flags) <= known, f"{ptr}/properties/{wire}", f"x-deserialize-* keys within {known}")
        if "items" in schema and isinstance(schema["items"], dict):
            schema["items"].pop("description", None)
        return Prop(
            wire=wire,
            schema=schema,
            required=required,
            nullable=nullable,
            description=desc,
            default=default,
            default_on_error=bool(flags.get("x-deserialize-default-on-error")),
            skip_invalid_items=bool(flags.get("x-deserialize-skip-invalid-items")),
            default_on_null=bool(flags.get("x-deserialize-default-on-null")),
        )

    def props_of(self, d: dict[str, Any], ptr: str) -> list[Prop]:
        req = set(d.get("required", []))
        return [self.make_prop(w, ps, w in req, ptr) for w, ps in d.get("properties", {}).items()]

    def plain_struct(self, name: str, d: dict[str, Any], ptr: str) -> Struct:
        expect("allOf" not in d and "oneOf" not in d and "anyOf" not in d, ptr, "a plain object")
        desc = d.get("description")
        return Struct(name, desc, self.props_of(d, ptr), unstable=self.unstable(name, desc), source=name)

    def target_props(self, target: str) -> list[Prop]:
        """Props of a referenced struct-like $def (a plain struct or a property-bag union)."""
        d = self.defs[target]
        ptr = f"/$defs/{target}"
        if self.is_bag_union(d):
            return self.merged_bag_struct(target, d, ptr).props
        if self.is_nullable_tag_union(d):
            return self.flattened_enum_struct(target, d, ptr).props
        expect(d.get("type") == "object" and not (d.get("anyOf") or d.get("oneOf")), ptr, "an object $def")
        return self.props_of(d, ptr)

    def merged_bag_struct(self, name: str, d: dict[str, Any], ptr: str) -> Struct:
        props = self.props_of(d, ptr)
        bags = [self.target_props(single_ref(b) or "") for b in (d.get("oneOf") or d.get("anyOf") or [])]
        props = merge_props(props, bags)
        desc = d.get("description")
        return Struct(name, desc, props, unstable=self.unstable(name, desc), source=name)

    def flattened_enum_struct(self, name: str, d: dict[str, Any], ptr: str) -> Struct:
        """`IdleStateUpdate`: a struct whose tag may be null; the tag becomes an enum field."""
        branches = d.get("oneOf") or d.get("anyOf") or []
        base = [p for p in self.props_of(d, ptr)]
        tag_keys = set()
        values: list[Any] = []
        open_ = False
        extra: list[list[Prop]] = []
        for i, b in enumerate(branches):
            bp = f"{ptr}/anyOf/{i}"
            props = b.get("properties", {})
            expect(len(props) == 1, bp, "exactly one (tag) property")
            ((key, tschema),) = props.items()
            tag_keys.add(key)
            if "const" in tschema:
                values.append(tschema["const"])
            elif b.get("title") in naming.CATCHALL_TITLES:
                open_ = True
            else:
                expect(tschema == {"type": "null"} and b.get("title") == "none", bp, "a null tag branch")
            r = single_ref(b)
            if r:
                extra.append(self.target_props(r))
        expect(len(tag_keys) == 1, ptr, "one tag key")
        (key,) = tag_keys
        literal = "Literal[" + ", ".join(f'"{v}"' for v in values) + "]" + (" | str" if open_ else "")
        out: list[Prop] = []
        for p in base:
            if p.wire == key:
                p.schema = {"type": "string"}
                p.type_override = literal
                p.nullable = True
            out.append(p)
        out = merge_props(out, [[*e] for e in extra], all_optional=True)
        desc = d.get("description")
        return Struct(name, desc, out, unstable=self.unstable(name, desc), source=name)

    # -- object unions -------------------------------------------------------------------------
    def union_variants(self, name: str) -> list[Struct]:
        """The leaf structs of an object union, tags outermost first (cached)."""
        if name in self.union_cache:
            return self.union_cache[name]
        d = self.defs[name]
        ptr = f"/$defs/{name}"
        branches = d.get("oneOf") or d.get("anyOf") or []
        base = self.props_of(d, ptr) if "properties" in d else []
        base_req = set(d.get("required", []))
        expect(all(p.required == (p.wire in base_req) for p in base), ptr, "consistent required")
        tag_keys: set[str] = set()
        out: list[Struct] = []
        catchall_seen = False
        for i, b in enumerate(branches):
            bp = f"{ptr}/{'oneOf' if 'oneOf' in d else 'anyOf'}/{i}"
            bdesc = b.get("description")
            props = b.get("properties", {})
            consts = [(k, v["const"]) for k, v in props.items() if "const" in v]
            title = b.get("title")
            target = single_ref(b)
            if consts:
                expect(len(consts) == 1, bp, "one tag constant")
                ((key, value),) = consts
                tag_keys.add(key)
                expect(key in b.get("required", []), bp, f"the tag {key!r} required")
                inline = [self.make_prop(w, ps, w in b.get("required", []), bp) for w, ps in props.items() if w != key]
                bname = pascal(str(value)) + name
                if target and self.is_object_union(target):
                    # nested tags: one leaf per inner variant, outer tag first
                    for inner in self.union_variants(target):
                        leaf_name = bname + "Other" if inner.catchall_key else inner_tag_prefix(inner) + bname
                        out.append(
                            Struct(
                                leaf_name,
                                inner.description or bdesc,
                                self.with_tag_props([(key, value)], inner, base),
                                tags=[(key, value), *inner.tags],
                                catchall_key=inner.catchall_key,
                                synthesized=inner.synthesized,
                                unstable=self.unstable(leaf_name, bdesc) or inner.unstable,
                                source=f"{name}[{key}={value}]/{inner.name}",
                            )
                        )
                    continue
                tprops = self.target_props(target) if target else []
                tdesc = self.defs[target].get("description") if target else None
                body = merge_base(base, [*inline, *tprops])
                if bname == target:
                    expect(self.refcount.get(target, 0) == 1, bp, f"{target} used only by this union")
                tag_prop = Prop(
                    key, {"type": "string", "const": value}, True, False, None, is_tag=True, tag_value=value
                )
                if bname == target:
                    # the branch takes the name of the $def it wraps: one class serves both, so the tag is
                    # optional (a standalone `RunningStateUpdate` has no `state`) but set by the constructor
                    tag_prop.tag_optional = True
                    tag_prop.required = False
                out.append(
                    Struct(
                        bname,
                        bdesc or tdesc,
                        [tag_prop, *body],
                        tags=[(key, value)],
                        unstable=self.unstable(bname, bdesc),
                        source=f"{name}[{key}={value}]",
                    )
                )
            elif title in naming.CATCHALL_TITLES and b.get("type") == "object":
                req = b.get("required", [])
                keys = [k for k in props if k in req]
                expect(len(keys) >= 1 and "not" in b, bp, "a catch-all with a tag and a `not`")
                key = keys[0]
                tag_keys.add(key)
                catchall_seen = True
                inline = [self.make_prop(w, ps, w in req, bp) for w, ps in props.items() if w != key]
                nested = b.get("anyOf") or b.get("oneOf")
                if nested:
                    bags = [self.target_props(single_ref(x) or "") for x in nested]
                    inline = merge_props(inline, bags)
                tag_prop = self.make_prop(key, props[key], True, bp)
                tag_prop.is_tag = True
                out.append(
                    Struct(
                        name + "Other",
                        bdesc,
                        [tag_prop, *merge_base(base, inline)],
                        catchall_key=key,
                        unstable=self.unstable(name + "Other", bdesc),
                        source=f"{name}[other]",
                    )
                )
            elif target is not None and "properties" not in b:
                # untagged branch pointing at a struct: the struct itself is the member
                expect(not base, bp, "an untagged branch only in unions without base properties")
                out.append(self.struct_for_untagged(target))
            elif "properties" in b and title is not None:
                key_name = naming.UNTAGGED_BRANCH_NAMES.get((name, title))
                expect(key_name is not None, bp, f"a naming-table entry for ({name!r}, {title!r})")
                assert key_name is not None
                inline = self.props_of(b, bp)
                out.append(
                    Struct(
                        key_name,
                        bdesc,
                        merge_base(base, inline),
                        unstable=self.unstable(key_name, bdesc),
                        source=f"{name}[{title}]",
                    )
                )
            else:
                raise SchemaShapeError(f"{bp}: unrecognised union branch")
        expect(len(tag_keys) <= 1, ptr, f"one tag key, found {sorted(tag_keys)}")
        if tag_keys and not catchall_seen:
            (key,) = tag_keys
            tag_prop = Prop(key, {"type": "string"}, True, False, "The tag of a variant this schema does not know.")
            tag_prop.is_tag = True
            out.append(
                Struct(
                    name + "Other",
                    f"A `{name}` variant this version of the schema does not define (kept verbatim).\n\n"
                    "Not in the schema: acp-trio adds it so that a message from a newer peer is kept, "
                    "never lost.",
                    [tag_prop, *[p for p in base]],
                    catchall_key=key,
                    synthesized=True,
                    unstable=self.unstable(name, d.get("description")),
                    source=f"{name}[synthesised other]",
                )
            )
        self.union_cache[name] = out
        return out

    def is_object_union(self, name: str) -> bool:
        d = self.defs[name]
        branches = d.get("oneOf") or d.get("anyOf")
        return (
            bool(branches)
            and not self.is_bag_union(d)
            and not self.is_nullable_tag_union(d)
            and not self.is_enum(branches)
        )

    def struct_for_untagged(self, target: str) -> Struct:
        d = self.defs[target]
        desc = d.get("description")
        return Struct(target, desc, self.target_props(target), unstable=self.unstable(target, desc), source=target)

    def with_tag_props(self, outer: list[tuple[str, Any]], inner: Struct, base: list[Prop]) -> list[Prop]:
        tags = [Prop(k, {"type": "string", "const": v}, True, False, None, is_tag=True, tag_value=v) for k, v in outer]
        props = [copy.copy(p) for p in inner.props]
        for p in props:
            if p.tag_optional:  # inside a nested product the inner tag is always on the wire
                p.tag_optional, p.required = False, True
        return [*tags, *merge_base(base, props)]

    # -- emitters ------------------------------------------------------------------------------
    def emit_struct(self, st: Struct) -> None:
        if st.name in self.model.structs:
            return
        self.add_name(st.name)
        self.model.structs[st.name] = st
        props: dict[str, Any] = {}
        for p in st.props:
            s = dict(p.schema)
            if p.description:
                s["description"] = p.description
            props[p.wire] = s
        self.out_defs[st.name] = {
            "type": "object",
            "title": st.name,
            "properties": props,
            "required": [p.wire for p in st.props if p.required],
            "additionalProperties": True,
        }

    def emit_alias(self, name: str, desc: str | None, schema: dict[str, Any]) -> None:
        schema.pop("description", None)
        self.add_name(name)
        self.model.aliases[name] = Alias(name, desc, schema, unstable=self.unstable(name, desc))
        self.out_defs[name] = {**schema, "title": name} if schema else {"title": name}

    def emit_enum(self, name: str, desc: str | None, branches: list[dict[str, Any]], ptr: str) -> None:
        values = [(b["const"], b.get("description")) for b in branches if "const" in b]
        open_ = any("const" not in b for b in branches)
        base = "int" if branches[0]["type"] == "integer" else "str"
        self.add_name(name)
        self.model.enums[name] = Enum(name, desc, values, open_, base, unstable=self.unstable(name, desc))
        t = "integer" if base == "int" else "string"
        self.out_defs[name] = {"title": name, "type": t}

    def emit_union(self, name: str, desc: str | None, members: list[dict[str, Any]]) -> None:
        self.add_name(name)
        self.model.unions[name] = Union(name, desc, members, unstable=self.unstable(name, desc))
        self.out_defs[name] = {"title": name}

    # -- methods -------------------------------------------------------------------------------
    def collect_methods(self) -> None:
        # one method name may be both a request and a notification (`mcp/message`), with sides of its own
        slots: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
        for name, d in self.src["$defs"].items():
            m = d.get("x-method")
            if m is None:
                continue
            side = d.get("x-side")
            expect(side in ("agent", "client", "protocol", "proxy"), f"/$defs/{name}/x-side", "a known side")
            for suffix, kind in (("Request", "request"), ("Response", "request"), ("Notification", "notification")):
                if name.endswith(suffix):
                    slot = slots.setdefault((m, kind), {})
                    expect(suffix not in slot, f"/$defs/{name}", f"one {suffix} for {m}")
                    slot[suffix] = (name, side)
                    break
            else:
                raise SchemaShapeError(f"/$defs/{name}: x-method on a $def not named *Request/*Response/*Notification")
        for (m, kind), slot in slots.items():
            if kind == "notification":
                (params, side), result = slot["Notification"], None
            else:
                expect(set(slot) == {"Request", "Response"}, m, "a request and a response")
                (params, side), (result, rside) = slot["Request"], slot["Response"]
                expect(side == rside, m, "the same x-side on request and response")
            desc = self.src["$defs"][params].get("description")
            unstable = is_unstable(desc) or (self.stable_methods is not None and m not in self.stable_methods)
            self.model.methods.append(Method(m, side, kind, params, result, unstable, desc))


def inner_tag_prefix(inner: Struct) -> str:
    return "".join(pascal(str(v)) for _, v in inner.tags)


def merge_base(base: list[Prop], body: list[Prop]) -> list[Prop]:
    """Base props first (but `_meta` last), then the branch's own; a branch prop overrides a base one."""
    names = {p.wire for p in body}
    head = [copy.copy(p) for p in base if p.wire not in names and p.wire != "_meta"]
    meta = [copy.copy(p) for p in base if p.wire == "_meta" and p.wire not in names]
    return [*head, *[p for p in body if p.wire != "_meta"], *[p for p in body if p.wire == "_meta"], *meta]


def merge_props(props: list[Prop], bags: list[list[Prop]], all_optional: bool = False) -> list[Prop]:
    """Merge alternative property bags into one struct: a prop stays required only if every bag requires it."""
    out = [copy.copy(p) for p in props]
    seen = {p.wire for p in out}
    for bag in bags:
        for p in bag:
            if p.wire in seen:
                continue
            q = copy.copy(p)
            q.required = (not all_optional) and all(
                any(x.wire == p.wire and x.required for x in other) for other in bags
            )
            out.append(q)
            seen.add(p.wire)
    meta = [p for p in out if p.wire == "_meta"]
    return [p for p in out if p.wire != "_meta"] + meta


def preprocess(
    schema: dict[str, Any], variant: str, sha256: str, stable: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Model]:
    return _Pre(schema, variant, sha256, stable).run()
