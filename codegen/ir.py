"""The generator's intermediate representation: what the renderer needs, nothing more.

Contract: preprocessing (``codegen.preprocess``) turns one upstream schema into a ``Model``: structs
(attrs classes), enums (``Literal`` aliases), unions and plain aliases, plus the method table.
Field *types* of structs are filled in later from datamodel-code-generator's parse
(``codegen.dcg``); everything the runtime needs at decode time (wire names, tags, catch-alls,
nullability, ``x-deserialize-*`` leniency, schema defaults) is recorded here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NO_DEFAULT: Any = object()


@dataclass
class Prop:
    wire: str
    schema: dict[str, Any]  # the property schema with `null` removed (nullability is `nullable`)
    required: bool
    nullable: bool
    description: str | None
    default: Any = NO_DEFAULT
    default_on_error: bool = False
    skip_invalid_items: bool = False
    default_on_null: bool = False
    tag_value: Any = NO_DEFAULT  # for tag fields of tagged-union branches: the constant
    is_tag: bool = False
    tag_optional: bool = False  # the tag of a $def that is also a union branch: absent when decoded standalone
    type_override: str | None = None  # a type expression preprocessing decided (flattened enums)
    # filled by codegen.dcg
    attr: str = ""
    type_expr: str = ""


@dataclass
class Struct:
    name: str
    description: str | None
    props: list[Prop]
    tags: list[tuple[str, Any]] = field(default_factory=list)
    catchall_key: str | None = None
    synthesized: bool = False  # a catch-all the schema does not define
    unstable: bool = False
    source: str = ""  # the $def (or $def + branch) this came from


@dataclass
class Enum:
    name: str
    description: str | None
    values: list[tuple[Any, str | None]]
    open: bool
    base: str  # "str" or "int"
    unstable: bool = False


@dataclass
class Union:
    name: str
    description: str | None
    members: list[dict[str, Any]]  # member schemas: {"$ref": name} or primitive schemas
    unstable: bool = False


@dataclass
class Alias:
    name: str
    description: str | None
    schema: dict[str, Any]
    unstable: bool = False


@dataclass
class Method:
    method: str
    side: str  # "agent" | "client" | "protocol" | "proxy"
    kind: str  # "request" | "notification"
    params: str
    result: str | None
    unstable: bool
    description: str | None


@dataclass
class Model:
    variant: str
    sha256: str
    protocol_version: int
    structs: dict[str, Struct] = field(default_factory=dict)
    enums: dict[str, Enum] = field(default_factory=dict)
    unions: dict[str, Union] = field(default_factory=dict)
    aliases: dict[str, Alias] = field(default_factory=dict)
    methods: list[Method] = field(default_factory=list)
    order: list[str] = field(default_factory=list)  # every public name, in schema order

    def kind_of(self, name: str) -> str:
        for kind, table in (
            ("struct", self.structs),
            ("enum", self.enums),
            ("union", self.unions),
            ("alias", self.aliases),
        ):
            if name in table:
                return kind
        raise KeyError(name)
