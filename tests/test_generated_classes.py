"""The generated classes are the classes ``attrs.define`` would build from the same source.

``acp_trio._spec.define`` builds them at import without compiling code; these tests build every
class of every variant a second time with the real ``attrs.define`` / ``attrs.field`` and compare
what users, cattrs and the converter can see: fields, slots, class-level attrs data, methods,
pickling, copying, ``attrs.evolve`` and ``attrs.asdict``.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import pickle
import weakref
from types import ModuleType
from typing import Any, ClassVar

import attrs
import pytest

import acp_trio._spec as spec

VARIANTS = ["v1", "v1_unstable", "v2", "v2_unstable"]


def _types_module(variant: str, *, with_attrs: bool) -> ModuleType:
    """The variant's ``_types.py`` executed again, with ``acp_trio._spec``'s ``define`` and ``field`` or
    with attrs' own (a fresh build: the imported classes may have had their types resolved since)."""
    path = importlib.import_module(f"acp_schema.{variant}._types").__file__
    assert path is not None
    name = f"_{'attrs' if with_attrs else 'spec'}_build_of_{variant}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    with pytest.MonkeyPatch.context() as mp:
        if with_attrs:
            mp.setattr(spec, "define", attrs.define)
            mp.setattr(spec, "field", attrs.field)
        module_spec.loader.exec_module(module)
    return module


def _classes(module: ModuleType) -> dict[str, type]:
    return {n: v for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__}


def _class_triples(variant: str) -> list[tuple[type, type, type]]:
    """(imported class, a fresh build of it with ``_spec.define``, the same with ``attrs.define``) per class."""
    imported = _classes(importlib.import_module(f"acp_schema.{variant}._types"))
    fresh = _classes(_types_module(variant, with_attrs=False))
    reference = _classes(_types_module(variant, with_attrs=True))
    assert imported and imported.keys() == fresh.keys() == reference.keys()
    triples = [(imported[n], fresh[n], reference[n]) for n in imported]
    # the reference really is attrs' work (it compiles __attrs_init__); ours is not
    assert all("attrs generated" in r.__attrs_init__.__code__.co_filename for _, _, r in triples)  # type: ignore[attr-defined]
    assert not any("attrs generated" in o.__attrs_init__.__code__.co_filename for o, _, _ in triples)  # type: ignore[attr-defined]
    return triples


def _required_values(cls: type) -> dict[str, Any]:
    """A value for every field without a default (the field's name: any picklable value will do)."""
    return {a.alias: f"value of {a.name}" for a in attrs.fields(cls) if a.default is attrs.NOTHING}


@pytest.fixture(scope="module", params=VARIANTS)
def triples(request: pytest.FixtureRequest) -> list[tuple[type, type, type]]:
    return _class_triples(request.param)


@pytest.fixture
def pairs(triples: list[tuple[type, type, type]]) -> list[tuple[type, type]]:
    """(fresh build with ``_spec.define``, fresh build with ``attrs.define``): for comparing structure."""
    return [(fresh, reference) for _, fresh, reference in triples]


@pytest.fixture
def importable(triples: list[tuple[type, type, type]]) -> list[tuple[type, type]]:
    """(the imported class, the ``attrs.define`` build): for instances, which pickle by module and name."""
    return [(imported, reference) for imported, _, reference in triples]


def test_every_generated_class_has_the_fields_attrs_define_gives_it(pairs: list[tuple[type, type]]) -> None:
    for ours, reference in pairs:
        assert attrs.has(ours), ours
        ours_fields, reference_fields = attrs.fields(ours), attrs.fields(reference)
        assert [a.name for a in ours_fields] == [a.name for a in reference_fields], ours
        for a, b in zip(ours_fields, reference_fields, strict=True):
            assert a == b, (ours, a.name)  # every Attribute slot: default, metadata, type, kw_only, alias, ...
            assert a.__getstate__() == b.__getstate__(), (ours, a.name)
            assert getattr(ours_fields, a.name) is a  # attrs.fields(C).name
        assert type(ours_fields).__name__ == type(reference_fields).__name__
        assert isinstance(ours_fields, tuple)
        assert attrs.fields_dict(ours) == attrs.fields_dict(reference)


def test_every_generated_class_has_the_class_attributes_attrs_define_gives_it(pairs: list[tuple[type, type]]) -> None:
    for ours, reference in pairs:
        assert set(vars(ours)) == set(vars(reference)), ours
        assert ours.__slots__ == reference.__slots__  # type: ignore[attr-defined]
        assert "__weakref__" in ours.__slots__  # type: ignore[attr-defined]
        for key in ("__match_args__", "__attrs_own_setattr__", "__hash__", "__annotations__", "__doc__"):
            assert vars(ours).get(key, "absent") == vars(reference).get(key, "absent"), (ours, key)
        for key in ("__acp_tags__", "__acp_catchall__"):
            assert getattr(ours, key, None) == getattr(reference, key, None), (ours, key)
        assert (ours.__name__, ours.__qualname__, ours.__bases__) == (
            reference.__name__,
            reference.__qualname__,
            reference.__bases__,
        )
        assert type(ours) is type(reference)
        for method in ("__init__", "__repr__", "__eq__"):
            assert getattr(ours, method).__code__.co_code == getattr(reference, method).__code__.co_code
        if hasattr(attrs, "inspect"):  # attrs >= 25.4
            props, reference_props = attrs.inspect(ours), attrs.inspect(reference)
            for slot in type(props).__slots__:
                if slot != "on_setattr_hook":  # a closure made per define() call
                    assert getattr(props, slot) == getattr(reference_props, slot), (ours, slot)


def test_attrs_init_sets_what_attrs_own_sets(pairs: list[tuple[type, type]]) -> None:
    for ours, reference in pairs:
        names = [a.name for a in attrs.fields(ours)]
        for kwargs in (_required_values(ours), {a.alias: f"set {a.name}" for a in attrs.fields(ours)}):
            a, b = object.__new__(ours), object.__new__(reference)
            ours.__attrs_init__(a, **kwargs)  # type: ignore[attr-defined]
            reference.__attrs_init__(b, **kwargs)  # type: ignore[attr-defined]
            assert [getattr(a, n) for n in names] == [getattr(b, n) for n in names], ours


def test_generated_instances_pickle_copy_evolve_and_convert_as_attrs_instances_do(
    importable: list[tuple[type, type]],
) -> None:
    for ours, reference in importable:
        x, r = ours(**_required_values(ours)), reference(**_required_values(reference))
        assert not hasattr(x, "__dict__")
        assert weakref.ref(x)() is x
        assert hash(x.__class__) and ours.__hash__ is None  # eq without hash: instances are unhashable
        assert x.__getstate__() == r.__getstate__()  # type: ignore[attr-defined]
        assert pickle.loads(pickle.dumps(x)) == x
        assert copy.copy(x) == x and copy.deepcopy(x) == x and copy.deepcopy(x) is not x
        assert attrs.evolve(x) == x and attrs.evolve(x) is not x
        assert attrs.asdict(x) == attrs.asdict(r)
        assert attrs.astuple(x) == attrs.astuple(r)
        first = attrs.fields(ours)[0]
        changed = attrs.evolve(x, **{first.alias: "changed"})
        assert getattr(changed, first.name) == "changed" and changed != x
        assert repr(x).replace(ours.__qualname__, "") == repr(r).replace(reference.__qualname__, "")


def test_define_refuses_what_the_generator_never_writes() -> None:
    with pytest.raises(TypeError):
        spec.define(kw_only=True, init=True, repr=False, eq=False)
    with pytest.raises(TypeError):

        @spec.define(kw_only=True, init=False, repr=False, eq=False)
        class Plain:
            x: int = 3  # not a field(...): attrs would take it, the generator never writes it

    class Base:
        pass

    with pytest.raises(TypeError):

        @spec.define(kw_only=True, init=False, repr=False, eq=False)
        class Derived(Base):
            x: int = spec.field(metadata={})

    @spec.define(kw_only=True, init=False, repr=False, eq=False)
    class Fine:
        KIND: ClassVar[str] = "kept"
        NOTHING_HERE: ClassVar[None] = None
        x: int = spec.field(default=1, metadata={"m": True})

        def __init__(self, *, x: int = 1) -> None:
            self.x = x

    assert (
        Fine.KIND == "kept"
        and "NOTHING_HERE" in vars(Fine)
        and attrs.fields(Fine).x.metadata["m"] is True
        and Fine().x == 1
    )
