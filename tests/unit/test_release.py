"""Release hygiene: nothing has been released before the version in galaxy.yml, so every plugin, and every option
that says when it was added, was added in that version."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]


def _documentation(path: Path) -> dict[str, Any]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(target, "id", None) for target in node.targets] == [
            "DOCUMENTATION"
        ]:
            return yaml.safe_load(ast.literal_eval(node.value))
    raise AssertionError(f"{path} has no DOCUMENTATION")


def _added(spec: Any, where: str) -> Iterator[tuple[str, Any]]:
    """Every version_added in a documentation or argument spec tree, with where it is."""
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "version_added":
                yield where, value
            else:
                yield from _added(value, f"{where}.{key}")
    elif isinstance(spec, list):
        for index, value in enumerate(spec):
            yield from _added(value, f"{where}[{index}]")


def test_every_plugin_was_added_in_this_version() -> None:
    plugins = sorted(
        path
        for kind in ("modules", "inventory", "filter")
        for path in (ROOT / "plugins" / kind).glob("*.py")
        if path.name != "__init__.py"
    )
    assert len(plugins) >= 10
    for path in plugins:
        documentation = _documentation(path)
        assert str(documentation.get("version_added")) == VERSION, path
        assert {str(value) for _where, value in _added(documentation, path.name)} == {VERSION}, path


def test_every_option_that_names_a_version_names_this_one() -> None:
    specs = [
        *(ROOT / "plugins" / "doc_fragments").glob("*.py"),
        *(ROOT / "roles").glob("*/meta/argument_specs.yml"),
        *(ROOT / "playbooks").glob("*.meta.yml"),
    ]
    for path in specs:
        text = path.read_text()
        tree = yaml.safe_load(text) if path.suffix == ".yml" else _fragments(path)
        wrong = [(where, value) for where, value in _added(tree, path.name) if str(value) != VERSION]
        assert wrong == [], path


def _fragments(path: Path) -> list[Any]:
    return [
        yaml.safe_load(ast.literal_eval(node.value))
        for klass in ast.parse(path.read_text()).body
        if isinstance(klass, ast.ClassDef)
        for node in klass.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
    ]


def test_the_changelog_says_what_this_release_is() -> None:
    fragments = [yaml.safe_load(path.read_text()) for path in (ROOT / "changelogs" / "fragments").glob("*.yml")]
    (summary,) = [fragment["release_summary"] for fragment in fragments if "release_summary" in fragment]
    for part in ("scheduling", "drain", "rolling", "waves", "remediation", "node agent", "playbooks", "inventory"):
        assert part in summary, part
    assert yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())["releases"] == {}
