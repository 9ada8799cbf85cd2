"""acp-trio vs the official ACP Python SDK (``agent-client-protocol``): codec speed, JSON-exactness, import time.

Usage::

    python benchmarks/bench.py [--quick] [--json out.json] [--strict]

Both ``acp_trio`` / ``acp_schema`` and the official SDK (import package ``acp``) must be importable
by this interpreter.  When ``acp_trio`` is not installed, the repository's ``generated/`` and
``runtime/`` directories are used.

What is measured, over the hand-written corpus of ``corpus.py``:

* JSON-exactness: decode each wire payload and encode it back; the result must equal the payload
  (strictly: same keys, same JSON types, same values; explicit ``null`` / ``false`` / ``[]`` kept).
* Codec speed: one "pass" decodes and re-encodes every corpus message; best and median of several
  repeats, in µs per pass.  Bar: acp-trio ≤ 0.5 x official.
* Import time: wall time of ``python -c "import acp_schema.v1"`` vs ``python -c "import acp.schema"``
  in fresh subprocesses, alternating, byte-code cached for both (a private PYTHONPYCACHEPREFIX);
  median.  Bar: acp-trio ≤ 1/3 x official.

Each side is driven the way its own wire path does it:

* acp-trio: ``converter.structure_fn(T)`` to decode, ``converter.unstructure_fn(type(obj))`` to encode.
* official SDK: ``Model.model_validate(payload)`` to decode (``acp.router.MessageRouter`` and
  ``acp.utils.validate_model``); to encode, params go through ``acp.utils.serialize_params``
  (``model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)``, used by
  ``request_model`` / ``notify_model``), results through the dump in
  ``acp.connection.Connection._execute_request``
  (``model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)``).

Exit status: 0; 1 if some message is not JSON-exact on the acp-trio side; 2 if the corpus fails its
schema self-check; 3 with ``--strict`` if a bar is missed.  The official side being inexact is
only reported.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import acp.schema as official_schema
from _shared import dist_version, runtime_build, subprocess_env, use_source_tree
from acp.utils import serialize_params
from corpus import CORPUS, DEF_NAMES, SCHEMA_PATH, Part, label, validate_corpus
from pydantic import BaseModel

_REPO: Final = Path(__file__).resolve().parent.parent

use_source_tree()
import acp_schema  # noqa: E402
import acp_schema.v1 as v1  # noqa: E402
import acp_trio  # noqa: E402
from acp_trio import converter  # noqa: E402

CODEC_BAR: Final = 0.5
IMPORT_BAR: Final = 1 / 3

Decode = Callable[[Any], Any]
Encode = Callable[[Any], Any]


# -- exactness ------------------------------------------------------------------------------------


def _show(v: Any) -> str:
    s = json.dumps(v, ensure_ascii=False) if _is_json(v) else repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def _is_json(v: Any) -> bool:
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return False
    return True


def _key(path: str, k: str) -> str:
    return f"{path}.{k}" if k.isidentifier() else f"{path}[{json.dumps(k)}]"


def json_diff(expected: Any, got: Any, path: str = "$") -> list[str]:
    """Differences between two JSON values, strictly (``1`` vs ``1.0`` vs ``true`` differ); empty: equal."""
    if type(expected) is not type(got):
        return [f"{path}: expected {_show(expected)}, got {_show(got)} ({type(got).__name__})"]
    if isinstance(expected, dict):
        out: list[str] = []
        for k, v in expected.items():
            if k not in got:
                out.append(f"{_key(path, k)}: dropped (was {_show(v)})")
            else:
                out += json_diff(v, got[k], _key(path, k))
        out += [f"{_key(path, k)}: added {_show(v)}" for k, v in got.items() if k not in expected]
        return out
    if isinstance(expected, list):
        out = []
        for i, (a, b) in enumerate(zip(expected, got, strict=False)):
            out += json_diff(a, b, f"{path}[{i}]")
        if len(expected) != len(got):
            out.append(f"{path}: expected {len(expected)} items, got {len(got)}")
        return out
    if expected != got:
        return [f"{path}: expected {_show(expected)}, got {_show(got)}"]
    return []


# -- the two sides --------------------------------------------------------------------------------


@dataclass
class Case:
    """One corpus message, with the decode/encode functions of one side."""

    label: str
    payload: dict[str, Any]
    decode: Decode
    encode: Encode
    decoded: Any = None
    diffs: list[str] = field(default_factory=list)
    error: str | None = None


def _trio_type(method: str, part: Part) -> Any:
    spec = v1.REQUESTS.get(method) or v1.NOTIFICATIONS.get(method)
    if spec is None:
        raise LookupError(f"acp_schema.v1 has no method {method!r}")
    return spec.params_type if part == "params" else spec.result_type


def trio_cases() -> list[Case]:
    cases = []
    for method, part, payload in CORPUS:
        t = _trio_type(method, part)
        decode = converter.structure_fn(t)
        # `t` is a class here, so this is `unstructure_fn(type(obj))`; a union alias would dispatch at run time.
        encode = converter.unstructure_fn(t)
        cases.append(Case(label(method, part, payload), payload, decode, encode))
    return cases


def _dump_result(model: BaseModel) -> dict[str, Any]:
    # The dump `acp.connection.Connection._execute_request` applies to a handler's result.
    return model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_unset=True)


def official_cases() -> list[Case]:
    cases = []
    for method, part, payload in CORPUS:
        model = cast(type[BaseModel], getattr(official_schema, DEF_NAMES[(method, part)]))
        encode: Encode = serialize_params if part == "params" else _dump_result
        cases.append(Case(label(method, part, payload), payload, model.model_validate, encode))
    return cases


def check_exactness(cases: list[Case]) -> None:
    for case in cases:
        try:
            case.decoded = case.decode(case.payload)
            encoded = case.encode(case.decoded)
        except Exception as exc:  # reported per message
            case.error = f"{type(exc).__name__}: {exc}"
            continue
        case.diffs = json_diff(case.payload, encoded)


# -- codec timing ---------------------------------------------------------------------------------


@dataclass
class Timing:
    best_us: float
    median_us: float
    runs_us: list[float]


def _pass_fns(cases: list[Case]) -> dict[str, Callable[[], None]]:
    roundtrip = [(c.decode, c.encode, c.payload) for c in cases]
    decode = [(c.decode, c.payload) for c in cases]
    encode = [(c.encode, c.decoded) for c in cases]

    def both() -> None:
        for dec, enc, payload in roundtrip:
            enc(dec(payload))

    def dec_only() -> None:
        for dec, payload in decode:
            dec(payload)

    def enc_only() -> None:
        for enc, obj in encode:
            enc(obj)

    return {"decode+encode": both, "decode": dec_only, "encode": enc_only}


def time_codecs(sides: dict[str, list[Case]], repeats: int, target_s: float) -> dict[str, dict[str, Timing]]:
    """µs per corpus pass for every (side, operation); the sides alternate within each repeat."""
    fns = {side: _pass_fns(cases) for side, cases in sides.items()}
    out: dict[str, dict[str, Timing]] = {side: {} for side in sides}
    for op in ("decode+encode", "decode", "encode"):
        timers = {side: timeit.Timer(fns[side][op]) for side in sides}
        numbers = {}
        for side, timer in timers.items():
            timer.timeit(max(1, timer.autorange()[0] // 10))  # warm up
            n, elapsed = timer.autorange()
            numbers[side] = max(1, round(n * target_s / elapsed))
        runs: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(repeats):
            for side, timer in timers.items():
                runs[side].append(timer.timeit(numbers[side]) / numbers[side] * 1e6)
        for side in sides:
            out[side][op] = Timing(min(runs[side]), statistics.median(runs[side]), runs[side])
    return out


# -- import timing --------------------------------------------------------------------------------


def time_imports(rounds: int) -> dict[str, dict[str, Any]]:
    """Median wall time (ms) of fresh interpreters running each statement, alternating; ``pass`` is the baseline."""
    stmts = {"acp-trio": "import acp_schema.v1", "official": "import acp.schema", "baseline": "pass"}
    cwd = Path(__file__).resolve().parent
    samples: dict[str, list[float]] = {k: [] for k in stmts}
    with tempfile.TemporaryDirectory(prefix="acp-bench-pycache-") as pycache:
        env = subprocess_env(pycache, acp_schema, acp_trio)

        def run(stmt: str) -> float:
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", stmt], env=env, cwd=cwd, check=True)
            return (time.perf_counter() - start) * 1e3

        for stmt in stmts.values():  # warm up: byte-code cache, page cache
            run(stmt)
            run(stmt)
        order = list(stmts)
        for i in range(rounds):
            for k in order if i % 2 == 0 else order[::-1]:
                samples[k].append(run(stmts[k]))
    return {k: {"stmt": stmts[k], "median_ms": statistics.median(v), "runs_ms": v} for k, v in samples.items()}


# -- report ---------------------------------------------------------------------------------------


def _status(case: Case) -> str:
    if case.error:
        return "ERROR"
    return "exact" if not case.diffs else f"{len(case.diffs)} diff(s)"


def _print_exactness(trio: list[Case], official: list[Case]) -> None:
    width = max(len(c.label) for c in trio)
    print(f"\nJSON-exactness (decode then encode == wire payload), {len(trio)} messages")
    print(f"  {'message':<{width}}  {'acp-trio':<12}  official")
    for t, o in zip(trio, official, strict=True):
        print(f"  {t.label:<{width}}  {_status(t):<12}  {_status(o)}")
    for side, cases in (("acp-trio", trio), ("official", official)):
        for c in cases:
            if c.error or c.diffs:
                print(f"  {side} / {c.label}:")
                for line in [c.error] if c.error else c.diffs:
                    print(f"      {line}")


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats and shorter runs")
    parser.add_argument("--json", metavar="PATH", type=Path, help="also write the results as JSON to PATH")
    parser.add_argument("--strict", action="store_true", help="exit 3 when a speed or import bar is missed")
    args = parser.parse_args(argv)
    repeats, target_s, import_rounds = (5, 0.02, 5) if args.quick else (15, 0.1, 11)

    print(f"Python {platform.python_version()} ({sys.executable})")
    print(
        f"acp-trio {dist_version('acp-trio')} [{Path(acp_trio.__file__ or '').parent}, {runtime_build()}], "
        f"cattrs {dist_version('cattrs')}; "
        f"agent-client-protocol {dist_version('agent-client-protocol')}, pydantic {dist_version('pydantic')}"
    )

    try:
        problems: list[str] | None = validate_corpus(SCHEMA_PATH)
    except ImportError:
        problems = None
    if problems is None:
        print(f"corpus: {len(CORPUS)} messages; schema self-check skipped (jsonschema is not installed)")
    else:
        print(f"corpus: {len(CORPUS)} messages; schema self-check against {SCHEMA_PATH}: {len(problems)} problem(s)")
        for p in problems:
            print(f"  {p}")
        if problems:
            return 2

    trio, official = trio_cases(), official_cases()
    check_exactness(trio)
    check_exactness(official)
    _print_exactness(trio, official)
    trio_exact = sum(not (c.diffs or c.error) for c in trio)
    official_exact = sum(not (c.diffs or c.error) for c in official)

    timing: dict[str, dict[str, Timing]] = {}
    if all(c.error is None for c in trio + official):
        timing = time_codecs({"acp-trio": trio, "official": official}, repeats, target_s)
        print(f"\nCodec, µs per corpus pass ({len(CORPUS)} messages; best / median of {repeats} repeats)")
        print(f"  {'operation':<14}  {'acp-trio':>17}  {'official':>17}  {'ratio (best)':>12}")
        for op in ("decode+encode", "decode", "encode"):
            t, o = timing["acp-trio"][op], timing["official"][op]
            print(
                f"  {op:<14}  {t.best_us:>8.1f} / {t.median_us:<6.1f}  {o.best_us:>8.1f} / {o.median_us:<6.1f}"
                f"  {t.best_us / o.best_us:>12.3f}"
            )
    else:
        print("\nCodec timing skipped: a decode or encode raised (see above)")

    imports = time_imports(import_rounds)
    base = imports["baseline"]["median_ms"]
    print(f"\nImport, median wall ms of a fresh `python -c ...` ({import_rounds} runs each, alternating)")
    for k in ("acp-trio", "official", "baseline"):
        net = "" if k == "baseline" else f"   (net of baseline: {imports[k]['median_ms'] - base:.1f})"
        print(f"  {k:<9} {imports[k]['stmt']:<22} {imports[k]['median_ms']:8.1f}{net}")

    codec_ratio = None
    if timing:
        codec_ratio = timing["acp-trio"]["decode+encode"].best_us / timing["official"]["decode+encode"].best_us
    import_ratio = imports["acp-trio"]["median_ms"] / imports["official"]["median_ms"]
    codec_ok = codec_ratio is not None and codec_ratio <= CODEC_BAR
    import_ok = import_ratio <= IMPORT_BAR
    exact_ok = trio_exact == len(trio)

    print("\nSummary")
    print(f"  {'measure':<36} {'acp-trio':>10} {'official':>10} {'ratio':>7} {'bar':>7}  verdict")
    if timing:
        t_us, o_us = (timing[s]["decode+encode"].best_us for s in ("acp-trio", "official"))
        print(
            f"  {'decode+encode, µs/pass (best)':<36} {t_us:>10.1f} {o_us:>10.1f} {codec_ratio:>7.3f} {'≤ 0.500':>7}"
            f"  {_verdict(codec_ok)}"
        )
    else:
        print(f"  {'decode+encode, µs/pass (best)':<36} {'-':>10} {'-':>10} {'-':>7} {'≤ 0.500':>7}  FAIL")
    t_ms, o_ms = imports["acp-trio"]["median_ms"], imports["official"]["median_ms"]
    print(
        f"  {'import, ms (median wall)':<36} {t_ms:>10.1f} {o_ms:>10.1f} {import_ratio:>7.3f} {'≤ 0.333':>7}"
        f"  {_verdict(import_ok)}"
    )
    n = len(CORPUS)
    t_cell, o_cell = f"{trio_exact}/{n}", f"{official_exact}/{n}"
    print(f"  {'JSON-exact messages':<36} {t_cell:>10} {o_cell:>10} {'':>7} {'all':>7}  {_verdict(exact_ok)}")
    if official_exact < n:
        print("  (the official side's inexact messages are reported only)")

    if args.json:
        report = {
            "python": platform.python_version(),
            "versions": {
                d: dist_version(d) for d in ("acp-trio", "cattrs", "attrs", "agent-client-protocol", "pydantic")
            },
            "corpus_schema_problems": problems,
            "exactness": {
                side: [
                    {"message": c.label, "exact": not (c.diffs or c.error), "diffs": c.diffs, "error": c.error}
                    for c in cases
                ]
                for side, cases in (("acp-trio", trio), ("official", official))
            },
            "codec_us_per_pass": {side: {op: asdict(t) for op, t in ops.items()} for side, ops in timing.items()},
            "imports": imports,
            "bars": {
                "codec": {"ratio": codec_ratio, "bar": CODEC_BAR, "pass": codec_ok},
                "import": {"ratio": import_ratio, "bar": IMPORT_BAR, "pass": import_ok},
                "exact": {"acp-trio": trio_exact, "official": official_exact, "of": n, "pass": exact_ok},
            },
        }
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")

    if not exact_ok:
        return 1
    if args.strict and not (codec_ok and import_ok):
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
