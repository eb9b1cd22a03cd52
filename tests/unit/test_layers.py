"""The layers of plugins/module_utils keep their import rules (docs/architecture.md, "Import rules").

- ``core/`` decides: the standard library and ``core/`` only; no network, process, thread or file module;
  no clock read (``time``, ``datetime.now()`` and the like): every time is passed in. Inside it,
  ``core/node/`` (what the node agent ships) imports only itself, ``core/maintenance/`` and
  ``core/remediation/`` never import each other, and the shared modules at the top import only ``node``.
- ``k8s/`` talks to the API: the standard library, ``core/node/errors`` and ``core/node/rfc3339`` (the times of
  Leases and events), its own modules, the official ``kubernetes`` package (only where it is the fallback
  loader) and, in ``k8s/module.py`` only (the edge where options arrive), ``ansible.module_utils`` and
  ``core/strict`` (the names of unknown options).
- ``engines/`` act: the standard library, ``core/``, ``k8s/`` and each other; never Ansible.
- The files the node_agent role ships to nodes import nothing outside that set.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
UTILS = ROOT / "plugins" / "module_utils"
PREFIX = "ansible_collections.nodeops.maintenance.plugins.module_utils"

#: standard-library modules that reach outside the process (network, processes, threads, files) or read a clock
IMPURE = {
    "asyncio",
    "concurrent",
    "http",
    "multiprocessing",
    "os",
    "pathlib",
    "queue",
    "random",
    "select",
    "shutil",
    "socket",
    "ssl",
    "subprocess",
    "tempfile",
    "threading",
    "time",
    "urllib",
}
#: pure modules of impure packages
PURE_EXCEPTIONS = {"urllib.parse"}
CLOCK_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter"}


def imports(path: Path, package: list[str] | None = None) -> list[tuple[int, str]]:
    """(line, absolute dotted module) of every import in the file, relative ones resolved from its package
    under module_utils (by default, where the file is)."""
    package = [*path.relative_to(UTILS).parent.parts] if package is None else package
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([PREFIX, *base, *([node.module] if node.module else [])])
                if node.module is None:  # from . import x: each name is a module of the package
                    found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
                    continue
                found.append((node.lineno, module))
            else:
                found.append((node.lineno, str(node.module)))
    return found


def layer_of(module: str) -> str:
    """core, k8s, engines (ours), ansible, kubernetes, future, or stdlib:<top>."""
    if module.startswith(PREFIX + "."):
        return module[len(PREFIX) + 1 :].split(".")[0]
    if module == PREFIX:
        return "module_utils"
    top = module.split(".")[0]
    if top in ("ansible", "ansible_collections"):
        return "ansible"
    if top in ("kubernetes", "urllib3", "yaml"):
        return top
    if top == "__future__":
        return "future"
    return f"stdlib:{top}"


def files(layer: str) -> list[Path]:
    return sorted((UTILS / layer).rglob("*.py"))


def core_part(module: str) -> str:
    """Where in core/ a core module is: node, maintenance, remediation, or top (the shared ones)."""
    parts = module[len(PREFIX) + 1 :].split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in ("node", "maintenance", "remediation") else "top"


#: what each part of core/ may import of core/
CORE_RULES = {
    "node": {"node"},
    "top": {"top", "node"},
    "maintenance": {"top", "node", "maintenance"},
    "remediation": {"top", "node", "remediation"},
}


def test_the_layers_are_where_the_rules_say() -> None:
    """The rules below cover every package of module_utils; a new package needs its rule first."""
    assert sorted(p.name for p in UTILS.iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "core",
        "engines",
        "k8s",
    ]
    assert sorted(p.name for p in (UTILS / "core").iterdir() if p.is_dir() and p.name != "__pycache__") == [
        "maintenance",
        "node",
        "remediation",
    ]


@pytest.mark.parametrize("path", files("core"), ids=lambda p: p.name)
def test_core_imports_only_the_pure_standard_library_and_core(path: Path) -> None:
    package = [*path.relative_to(UTILS).parent.parts]
    assert core_import_faults(path, package) == []


def core_import_faults(path: Path, package: list[str]) -> list[str]:
    own = core_part(".".join([PREFIX, *package, path.stem]))
    wrong = []
    for line, module in imports(path, package):
        layer = layer_of(module)
        if layer == "core":
            if core_part(module) not in CORE_RULES[own]:
                wrong.append(f"{path.name}:{line} imports {module} ({own} may import {sorted(CORE_RULES[own])})")
            continue
        if layer == "future":
            continue
        if not layer.startswith("stdlib:") or (layer.split(":")[1] in IMPURE and module not in PURE_EXCEPTIONS):
            wrong.append(f"{path.name}:{line} imports {module}")
    return wrong


@pytest.mark.parametrize("path", files("core"), ids=lambda p: p.name)
def test_core_reads_no_clock(path: Path) -> None:
    assert clock_reads(path) == []


def clock_reads(path: Path) -> list[str]:
    return [
        f"{path.name}:{node.lineno} calls .{node.func.attr}()"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCK_CALLS
    ]


@pytest.mark.parametrize("path", files("k8s"), ids=lambda p: p.name)
def test_k8s_imports_only_core_errors_times_and_the_client_libraries(path: Path) -> None:
    wrong = []
    for line, module in imports(path):
        layer = layer_of(module)
        allowed = (
            layer in ("k8s", "future", "kubernetes", "urllib3", "yaml")
            or layer.startswith("stdlib:")
            or module in (f"{PREFIX}.core.node.errors", f"{PREFIX}.core.node.rfc3339")
            or (path.name == "module.py" and (layer == "ansible" or module == f"{PREFIX}.core.strict"))
        )
        if not allowed:
            wrong.append(f"{path.name}:{line} imports {module}")
    assert wrong == []


@pytest.mark.parametrize("path", files("engines"), ids=lambda p: p.name)
def test_engines_never_import_ansible(path: Path) -> None:
    wrong = [
        f"{path.name}:{line} imports {module}"
        for line, module in imports(path)
        if layer_of(module) not in ("core", "k8s", "engines", "future") and not layer_of(module).startswith("stdlib:")
    ]
    assert wrong == []


def test_the_files_shipped_to_nodes_are_core_node() -> None:
    """The role ships exactly core/node (whose imports the rules above keep inside it)."""
    shipped = yaml.safe_load((ROOT / "roles/node_agent/vars/main.yml").read_text())["node_agent_core_files"]
    assert sorted(shipped) == sorted(p.name for p in (UTILS / "core" / "node").glob("*.py"))


def test_the_rules_catch_what_they_forbid(tmp_path: Path) -> None:
    """The checks above see a forbidden import and a clock read (so an empty list means something)."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import time\nfrom ...k8s.client import Client\nfrom ..maintenance import scheduler\n"
        "from . import nodes\nx = time.monotonic()\n"
    )
    layers = [layer_of(found[1]) for found in imports(probe, ["core", "node"])]
    assert layers == ["stdlib:time", "k8s", "core", "core"]
    assert core_import_faults(probe, ["core", "node"]) == [
        "probe.py:1 imports time",
        f"probe.py:2 imports {PREFIX}.k8s.client",
        f"probe.py:3 imports {PREFIX}.core.maintenance (node may import ['node'])",
    ]
    assert clock_reads(probe) == ["probe.py:5 calls .monotonic()"]
