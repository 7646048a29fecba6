"""DESIGN §1-2: the cores import no I/O. storage/ uses no network, no asyncio and reads no clock;
replication/ and controller/ also take time and randomness from their callers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NETWORK_AND_ASYNC = {"asyncio", "aiohttp", "socket", "selectors", "ssl", "http", "urllib"}
CLOCK_AND_RANDOM = {"time", "random", "uuid", "secrets"}
FORBIDDEN = {
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


def test_the_client_pulls_in_only_the_controllers_plain_data() -> None:
    """client/protocol.py re-exports the topic-admin shapes of controller/controller_api.py, so that
    module must stay plain data over wire (no Raft, no metadata state)."""
    assert imported_modules(ROOT / "controller" / "controller_api.py") - {"__future__", "collections",
                                                                          "dataclasses", "enum"} == {"wire"}
    client_imports = set().union(*(imported_modules(path) for path in (ROOT / "client").rglob("*.py")))
    assert client_imports & {"node", "replication", "pipeline"} == set()
    controller_modules = {
        node.module
        for path in (ROOT / "client").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "controller"
    }
    assert controller_modules == {"controller.controller_api"}
