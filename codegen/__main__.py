"""``python -m codegen [--check]``: regenerate ``generated/acp_schema`` or verify it is current."""

from __future__ import annotations

import argparse
import sys

from .generate import GENERATED, check, generate


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    ap.add_argument("--check", action="store_true", help="fail (exit 1) when generated/ is stale")
    args = ap.parse_args(argv)
    if args.check:
        stale = check()
        if stale:
            print("generated/ is stale; run `nox -s regenerate`. Differing files:", file=sys.stderr)
            for name in stale:
                print(f"  {name}", file=sys.stderr)
            return 1
        print("generated/ is current")
        return 0
    generate(GENERATED)
    print(f"regenerated {GENERATED / 'acp_schema'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
