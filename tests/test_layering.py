"""DESIGN §1-2: the cores import no I/O. storage/ uses no network, no asyncio and reads no clock;
replication/ and controller/ also take time and randomness from their callers. wire/, the vocabulary
every layer shares, is a leaf: plain data and its codec, importing nothing of ours."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NETWORK_AND_ASYNC = {"asyncio", "aiohttp", "socket", "selectors", "ssl", "http", "urllib"}
CLOCK_AND_RANDOM = {"time", "random", "uuid", "secrets"}
OURS = {"wire", "storage", "replication", "controller", "node", "client", "pipeline", "tests", "bench"}
FORBIDDEN = {
    "wire": NETWORK_AND_ASYNC | CLOCK_AND_RANDOM | (OURS - {"wire"}),
    "storage": NETWORK_AND_ASYNC | {"time", "client", "node", "replication", "controller", "pipeline"},
    "replication": NETWORK_AND_ASYNC | CLOCK_AND_RANDOM | {"client", "node", "controller", "pipeline"},
    "controller": NETWORK_AND_ASYNC | CLOCK_AND_RANDOM | {"client", "node", "replication", "pipeline"},
}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_core_packages_import_no_io(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path) & FORBIDDEN[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    offenders = {path: names for path, names in offenders.items() if names}
    assert offenders == {}, f"{package}/ must not import these: {offenders}"


def test_storage_is_checked_at_all() -> None:
    assert len(list((ROOT / "storage").rglob("*.py"))) > 10


def test_wire_imports_only_the_standard_library_and_msgpack() -> None:
    """The vocabulary is a leaf: any layer may import it without pulling in another of ours."""
    imports = set().union(*(imported_modules(path) for path in (ROOT / "wire").rglob("*.py")))
    assert imports - set(sys.stdlib_module_names) <= {"wire", "msgpack"}


def test_the_client_imports_no_core_and_no_node() -> None:
    """The client speaks the wire vocabulary (and storage's batch codec), never the controller's,
    replication's or the node's code."""
    client_imports = set().union(*(imported_modules(path) for path in (ROOT / "client").rglob("*.py")))
    assert client_imports & {"controller", "replication", "node", "pipeline"} == set()


@pytest.mark.parametrize("module", sorted(path.stem for path in (ROOT / "bench").glob("*.py")))
def test_bench_modules_import(module: str) -> None:
    """Benchmarks run behind an option, never in the default run: at least each must import."""
    importlib.import_module(f"bench.{module}")
