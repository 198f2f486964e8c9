#!/usr/bin/env python3
"""Does every use of ``ltx_kernels`` in an ltx-core checkout resolve against this package?

    python tools/upstream/check_ltx_core_imports.py /tmp/ltx2/packages/ltx-core/src

Reads the Python files under the given folder (text only: nothing of it is imported or run) and
collects what they take from ``ltx_kernels``: ``from ltx_kernels[.x] import name`` (at top level
or inside functions, as ltx-core defers its kernel imports), ``import ltx_kernels.x``, and the
attributes read off a module bound that way (``from ltx_kernels import nvfp4`` then
``nvfp4.quantize_nvfp``). Each is then looked up in this package: a module is imported, a name is
an attribute. Prints one line per distinct reference with its first place, and exits 1 when one
is missing. ``tests/test_upstream_surface.py`` holds the surface as data for CI; this catches a
newer ltx-core that reaches for something new.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import sys
from pathlib import Path

PACKAGE = "ltx_kernels"


def references(root: Path) -> dict[str, str]:
    """'ltx_kernels.a.b' (a module or an attribute path) -> 'file:line' of its first use."""
    found: dict[str, str] = {}

    def add(ref: str, path: Path, node: ast.AST) -> None:
        found.setdefault(ref, f"{path.relative_to(root)}:{node.lineno}")

    for path in sorted(root.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        except (SyntaxError, UnicodeDecodeError):
            continue
        inner = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}  # not a chain's end
        aliases: dict[str, str] = {}  # local name -> the ltx_kernels path it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and (node.module == PACKAGE or node.module.startswith(PACKAGE + ".")):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    add(full, path, node)
                    aliases[a.asname or a.name] = full
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == PACKAGE or a.name.startswith(PACKAGE + "."):
                        add(a.name, path, node)
                        if a.asname:
                            aliases[a.asname] = a.name
                        else:
                            aliases[PACKAGE] = PACKAGE
        for node in ast.walk(tree):  # attributes read off the bound names: the longest chain
            if isinstance(node, ast.Attribute) and id(node) not in inner:
                chain, cur = [], node
                while isinstance(cur, ast.Attribute):
                    chain.append(cur.attr)
                    cur = cur.value
                if isinstance(cur, ast.Name) and cur.id in aliases:
                    add(".".join([aliases[cur.id], *reversed(chain)]), path, node)
    return found


def resolve(ref: str) -> str | None:
    """None when ``ref`` exists in this package, else why not. Leading parts are modules as far as
    they import; the rest are attributes."""
    parts = ref.split(".")
    obj, i = None, len(parts)
    while i > 0:
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ModuleNotFoundError as e:
            if e.name is None or not ".".join(parts[:i]).startswith(e.name):
                return f"importing {'.'.join(parts[:i])}: {e}"
            i -= 1
        except Exception as e:  # noqa: BLE001
            return f"importing {'.'.join(parts[:i])}: {type(e).__name__}: {e}"
    if obj is None:
        return f"no module {parts[0]}"
    for j in range(i, len(parts)):
        if not hasattr(obj, parts[j]):
            return f"{'.'.join(parts[:j])} has no attribute {parts[j]!r}"
        obj = getattr(obj, parts[j])
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="ltx-core's source folder (packages/ltx-core/src of an LTX-2 checkout)")
    args = ap.parse_args(argv)
    if not args.src.is_dir():
        ap.error(f"{args.src} is not a folder")
    refs = references(args.src)
    if not refs:
        print(f"no use of {PACKAGE} under {args.src}")
        return 1
    missing = 0
    for ref, where in sorted(refs.items()):
        why = resolve(ref)
        missing += why is not None
        print(f"{'ok' if why is None else 'MISSING':8s} {ref:60s} {where}" + (f"  ({why})" if why else ""))
    print(f"{len(refs)} references, {missing} missing")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
