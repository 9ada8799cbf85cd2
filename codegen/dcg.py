"""datamodel-code-generator, through its Python API: normalised schema -> field names and types.

Contract: ``annotate(normalised, model)`` parses the normalised schema with
datamodel-code-generator's JSON Schema parser (dataclass model set, Python 3.11 target) and fills
in every ``Prop.attr`` (snake_case, ``_meta`` -> ``meta``) and ``Prop.type_expr`` (the Python
type of the non-null value, built from the parser's data types).  It checks that the parser named
every struct exactly as preprocessing did and kept the schema's field order, so generator drift
fails here instead of leaking numbered names.  Rendering is ours (``codegen.render``): the parser
has no attrs output.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

from datamodel_code_generator import DataModelType, PythonVersion
from datamodel_code_generator.model import get_data_model_types
from datamodel_code_generator.parser.jsonschema import JsonSchemaParser

from .ir import Model
from .preprocess import SchemaShapeError

_PRIMITIVE = {"str": "str", "int": "int", "float": "float", "bool": "bool", "Any": "Any", "None": "None"}


def _render(dt: Any) -> str:
    if dt.reference is not None:
        return str(dt.reference.short_name)
    if dt.literals:
        return "Literal[" + ", ".join(repr(v) for v in dt.literals) + "]"
    inner = [_render(x) for x in dt.data_types]
    if dt.is_list:
        expect_one = " | ".join(inner) if inner else "Any"
        return f"list[{expect_one}]"
    if dt.is_dict:
        value = " | ".join(inner) if inner else "Any"
        return f"dict[str, {value}]"
    if inner:
        return " | ".join(dict.fromkeys(inner))
    t = dt.type
    if t is None:
        return "Any"
    if t not in _PRIMITIVE:
        raise SchemaShapeError(f"datamodel-code-generator produced an unexpected type {t!r}")
    return _PRIMITIVE[t]


def annotate(normalised: dict[str, Any], model: Model) -> None:
    types = get_data_model_types(DataModelType.DataclassesDataclass, PythonVersion.PY_311)
    with warnings.catch_warnings():
        # `format: uint16/uint32/uint64` is not known to the generator; it falls back to `int` (fine)
        warnings.simplefilter("ignore", UserWarning)
        parser = JsonSchemaParser(
            json.dumps(normalised),
            data_model_type=types.data_model,
            data_model_root_type=types.root_model,
            data_model_field_type=types.field_model,
            data_type_manager_type=types.data_type_manager,
            target_python_version=PythonVersion.PY_311,
            snake_case_field=True,
            remove_special_field_name_prefix=True,
            strict_nullable=True,
            use_title_as_name=True,
            use_standard_collections=True,
            use_union_operator=True,
            use_schema_description=True,
            use_field_description=True,
            capitalise_enum_members=False,
            keyword_only=True,
            formatters=[],
        )
        parser.parse()
    results = {m.class_name: m for m in parser.results}
    for name, st in model.structs.items():
        dm = results.get(name)
        if dm is None:
            raise SchemaShapeError(f"datamodel-code-generator did not name a model {name!r}")
        # the dataclass model moves required fields first; we keep the schema's order, matching by wire name
        fields = {str(f.original_name or f.name): f for f in dm.fields}
        if set(fields) != {p.wire for p in st.props}:
            raise SchemaShapeError(f"{name}: generator fields {sorted(fields)} differ from the schema's")
        for prop in st.props:
            f = fields[prop.wire]
            attr = str(f.name)
            if attr == "extra_fields":
                raise SchemaShapeError(f"{name}.{prop.wire}: clashes with the generated `extra_fields` attribute")
            prop.attr = attr
            if prop.type_override is not None:
                prop.type_expr = prop.type_override
            elif prop.is_tag and prop.tag_value is not None and prop.schema.get("const") is not None:
                prop.type_expr = f"Literal[{prop.tag_value!r}]"
            else:
                prop.type_expr = _render(f.data_type)
