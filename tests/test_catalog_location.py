"""The catalogs are found the same way from an installed package, an editable install and a
source checkout, from any working directory (issue 11)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNIPPET = ("from codesign import simulate; "
           "r = simulate(model='gpt3-175b', gpu='h100', num_gpus=64, tp=8, pp=8, "
           "global_batch_size=64); print(r.feasible, round(r.step_time_s, 6))")


def _run(cwd: Path, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", SNIPPET], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_catalog_root_prefers_installed_data_and_falls_back_to_checkout() -> None:
    from codesign.catalogs import catalog_root

    for kind in ("hardware", "topologies", "workloads", "experiments"):
        root = catalog_root(kind)  # type: ignore[arg-type]
        names = [e.name for e in root.iterdir()]
        assert any(n.endswith(".yaml") for n in names), kind


def test_non_editable_install_then_run_from_repository_root(tmp_path: Path) -> None:
    """The README's first command is ``pip install .``: afterwards, Python started in the
    repository root imports the checkout's ``codesign/`` (no catalog subpackages there)."""
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                          "--target", str(target), str(ROOT)],
                         capture_output=True, text=True, timeout=300)
    # the README's first command builds the same wheel: failing to is a failure here too
    assert pip.returncode == 0, pip.stderr
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    from_root = _run(ROOT, env)  # the checkout shadows the installed copy
    from_elsewhere = _run(tmp_path, env)  # the installed copy, with its package data
    assert from_root.startswith("True") and from_root == from_elsewhere


def test_source_checkout_from_another_directory(tmp_path: Path) -> None:
    """No install at all: the checkout on PYTHONPATH, run from an unrelated directory."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    assert _run(tmp_path, env).startswith("True")
