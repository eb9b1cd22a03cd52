"""Every module's argument spec agrees with its documentation as ansible-doc renders it (with the doc fragments):
the same options and sub-options, with the same types, defaults, choices, elements, aliases and required flags.

The options that several modules share keep their argument specs in plugins/module_utils (request_options.py,
reconcile_options.py, and the connection options of k8s/client.py) and their documentation in the doc fragment of the
same name in plugins/doc_fragments; this test holds each pair together in every module that uses it, and the
option names to the collection's naming scheme.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils import basic
from ansible_collections.nodeops.maintenance.plugins.module_utils.core import strict
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.crd_schemas import SCHEMAS
from support.ansible_cli import BIN, clean_env

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py") if p.stem != "__init__")
PACKAGE = "ansible_collections.nodeops.maintenance.plugins.modules"


class _Captured(Exception):
    def __init__(self, argument_spec: dict[str, Any]) -> None:
        super().__init__("argument spec captured")
        self.argument_spec = argument_spec


def argument_spec(name: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The whole argument spec the module hands to AnsibleModule (the connection options included)."""

    def capture(self: Any, argument_spec: dict[str, Any], **_: Any) -> None:
        raise _Captured(argument_spec)

    monkeypatch.setattr(basic.AnsibleModule, "__init__", capture)
    module = importlib.import_module(f"{PACKAGE}.{name}")
    if not hasattr(module, "main"):  # documentation of an action that runs on the controller alone: its spec
        spec: dict[str, Any] = importlib.import_module(f"{PACKAGE.replace('.modules', '.action')}.{name}").ARGUMENT_SPEC
        return spec
    with pytest.raises(_Captured) as captured:
        module.main()
    return captured.value.argument_spec


@cache
def rendered() -> dict[str, Any]:
    """ansible-doc's JSON of every module, fragments merged."""
    names = [f"nodeops.maintenance.{name}" for name in MODULES]
    out = subprocess.run(
        [str(BIN / "ansible-doc"), "--json", "-t", "module", *names],
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(),
        timeout=300,
    ).stdout
    return {name.rsplit(".", 1)[1]: doc["doc"] for name, doc in json.loads(out).items()}


def from_spec(options: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {
            "type": spec.get("type", "str"),
            "default": spec.get("default"),
            "choices": spec.get("choices"),
            "elements": spec.get("elements"),
            "aliases": sorted(spec.get("aliases") or []),
            "required": bool(spec.get("required")),
            "options": from_spec(spec["options"]) if spec.get("options") else None,
        }
        for name, spec in options.items()
    }


def from_docs(options: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {
            "type": doc.get("type", "str"),
            "default": doc.get("default"),
            "choices": doc.get("choices"),
            "elements": doc.get("elements"),
            "aliases": sorted(doc.get("aliases") or []),
            "required": bool(doc.get("required")),
            "options": from_docs(doc["suboptions"]) if doc.get("suboptions") else None,
        }
        for name, doc in options.items()
    }


@pytest.mark.parametrize("name", MODULES)
def test_the_argument_spec_is_the_documented_one(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = from_spec(argument_spec(name, monkeypatch))
    docs = from_docs(rendered()[name].get("options") or {})
    assert sorted(spec) == sorted(docs), f"{name}: options in the spec only / in the docs only"
    for option in spec:
        assert spec[option] == docs[option], f"{name}: option {option}"


# Names the collection gave up for one naming scheme; none may come back as an option or an alias.
RETIRED = {
    "timeout",  # drain: timeout_seconds; maintenance_reconcile: settle_timeout
    "concurrency",  # workers
    "label_selector",  # node_selector (pod ones: pod_selector)
    "grace_period",  # terminate_grace_period, as kubernetes.core.k8s_drain
}


def names(options: dict[str, Any], aliases: bool = True) -> set[str]:
    out: set[str] = set()
    for name, spec in options.items():
        out |= {name, *((spec.get("aliases") or []) if aliases else [])}
        out |= names(spec.get("options") or {}, aliases)
    return out


def crd_field_names(node: Any) -> set[str]:
    """Every field name of the CRDs in the collection."""
    if isinstance(node, dict):
        found = set(node.get("properties") or {})
        return found.union(*(crd_field_names(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(crd_field_names(item) for item in node))
    return set()


@pytest.mark.parametrize("name", MODULES)
def test_the_option_names_follow_the_scheme(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = argument_spec(name, monkeypatch)
    every = names(spec)
    assert not every & RETIRED, f"{name}: {sorted(every & RETIRED)}"
    snake = {option for option in every if re.fullmatch(r"[a-z][a-z0-9_]*", option)}
    assert names(spec, aliases=False) <= snake, f"{name}: not snake_case"
    # an alias in camelCase is the CRD's name of the field the option mirrors, so a spec copied from an object works
    assert every - snake <= crd_field_names(SCHEMAS), f"{name}: camelCase aliases that are no CRD field"
    # a list of node names is never called nodes: nodes are Node objects
    if "nodes" in spec:
        assert spec["nodes"].get("elements") != "str", f"{name}: nodes holds Node objects, node_names their names"
    # wait_timeout only beside wait
    if "wait_timeout" in spec:
        assert "wait" in spec, f"{name}: wait_timeout without wait; name the timeout after what it bounds"


# the options that stand for a CRD's fields, and where: module -> (option or "" for the top level, kind, the spec
# field the option is)
MIRRORS = {
    "node_maintenance": ("", "NodeMaintenance"),
    "rolling_maintenance": ("", "NodeMaintenance"),
    "maintenance_plan": ("config", "MaintenanceOperatorConfig"),
}


def missing_aliases(options: dict[str, Any], schema: dict[str, Any], where: str = "") -> list[str]:
    """The options whose CRD field (their name in camelCase) is in ``schema`` but not among their aliases."""
    out = []
    fields = schema.get("properties") or {}
    for name, option in options.items():
        field = strict.camel(name)
        if field not in fields:
            continue
        if field != name and field not in (option.get("aliases") or []):
            out.append(f"{where}{name} ({field})")
        inner = fields[field].get("items", fields[field])
        out += missing_aliases(option.get("options") or {}, inner, f"{where}{name}.")
    return out


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_an_option_that_mirrors_a_crd_field_takes_the_field_s_name_too(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = argument_spec(name, monkeypatch)
    option, kind = MIRRORS[name]
    options = spec[option]["options"] if option else spec
    assert missing_aliases(options, SCHEMAS[kind]["schema"]["properties"]["spec"]) == []
