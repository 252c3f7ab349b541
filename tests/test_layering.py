"""The package's imports point one way (README, 'Package map'): a module may import only from
its own layer or lower ones, and the cost models never import the workload or the engine."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "codesign"

#: layer of each top-level module or subpackage; imports must go to an equal or lower number
LAYER = {"units": 0, "errors": 0, "catalogs": 0, "runtime": 0, "specs": 1, "ir": 2,
         "groups": 2, "measured": 2,
         "workload": 3, "hardware": 3, "network": 3, "engine": 4, "report": 5, "serving": 5,
         "api": 6, "validation": 7, "search": 7, "trace": 7, "experiments": 8, "cli": 9,
         "__init__": 9}
#: siblings on one layer that must not import each other
ISOLATED = {"workload", "hardware", "network"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("codesign."):
                out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out |= {a.name.split(".")[1] for a in node.names if a.name.startswith("codesign.")}
    return out


def test_imports_point_down() -> None:
    problems = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).parts
        own = rel[0].removesuffix(".py")
        assert own in LAYER, f"{path}: add the module to LAYER in this test"
        for target in _imports(path):
            if target == own:
                continue
            if LAYER[target] > LAYER[own]:
                problems.append(f"{'/'.join(rel)} imports higher layer {target}")
            elif own in ISOLATED and target in ISOLATED:
                problems.append(f"{'/'.join(rel)} imports sibling model {target}")
    assert not problems, "\n".join(problems)


def test_every_subpackage_is_listed_for_installation() -> None:
    """pyproject lists packages explicitly (the catalogs are mapped from the repo root), so a
    new subpackage must be added there or a non-editable install silently lacks it."""
    import tomllib

    pyproject = tomllib.loads((PKG.parent / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    found = {".".join(("codesign", *p.parent.relative_to(PKG).parts))
             for p in PKG.rglob("__init__.py")}
    assert found <= listed, f"missing from pyproject: {sorted(found - listed)}"
