"""Write ``docs/playbooks.md``, the page of the collection's playbooks and their variables, from their argument
specs (``playbooks/<playbook>.meta.yml``): the variables are documented once, where the playbooks check them.

``python tests/support/playbook_docs.py`` (or ``make playbook-docs``) writes the page again after a spec
changes; tests/unit/test_playbook_arguments.py fails while it is out of date. (``ansible-doc`` shows the roles'
variables, ``ansible-doc -t role nodeops.maintenance.node_agent``, but has no page type for a playbook.)
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
TARGET = ROOT / "docs" / "playbooks.md"
# the order of the page: the everyday playbooks first
ORDER = ["install", "deploy_agent", "rolling_maintenance", "remediate", "reconcile"]

_MARKUP = [
    (re.compile(r"[OVCR]V?\(([^)]*)\)"), r"`\1`"),
    (re.compile(r"I\(([^)]*)\)"), r"*\1*"),
    (re.compile(r"U\(([^)]*)\)"), r"<\1>"),
    (re.compile(r"L\(([^,]*),\s*([^)]*)\)"), r"[\1](\2)"),
]


def markdown(text: str) -> str:
    """Ansible's documentation markup (O(), V(), C(), I(), U(), L()) as Markdown, on one line."""
    text = " ".join(str(text).split())
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return text


def paragraphs(value: Any) -> list[str]:
    return [markdown(v) for v in (value if isinstance(value, list) else [value])]


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def shown(value: Any) -> str:
    return "`" + (value if isinstance(value, str) else json.dumps(value)) + "`"


def rows(options: dict[str, Any], parent: str = "") -> list[str]:
    out = []
    for name, spec in options.items():
        kind = spec["type"] + (f" of {spec['elements']}" if "elements" in spec else "")
        default = "required" if spec.get("required") else shown(spec["default"]) if "default" in spec else ""
        text = " ".join(paragraphs(spec["description"]))
        if "choices" in spec:
            text += " One of " + ", ".join(shown(c) for c in spec["choices"]) + "."
        out.append(f"| `{parent}{name}` | {kind} | {cell(default)} | {cell(text)} |")
        out += rows(spec.get("options", {}), f"{parent}{name}.")
    return out


def page() -> str:
    lines = [
        "# The playbooks and their variables",
        "",
        "<!-- Generated from playbooks/*.meta.yml by tests/support/playbook_docs.py (make playbook-docs); do not",
        "     edit by hand. -->",
        "",
        "Run each as `ansible-playbook nodeops.maintenance.<name>`, giving its variables with `-e` or as AWX/AAP",
        "survey answers. The first tasks of every playbook check its variables against the table below before anything",
        "changes: a wrong type or a value outside the choices fails the run, naming the variable, and a variable that",
        "starts like the playbook's own but is none of them (a typo such as `rolling_maxParallelOperations`) is a",
        "warning that names the closest one.",
        "",
    ]
    for name in ORDER:
        meta = yaml.safe_load((PLAYBOOKS / f"{name}.meta.yml").read_text())
        spec = meta["argument_specs"]["main"]
        lines += [f"## {name}", "", f"{markdown(spec['short_description'])}.", ""]
        for text in paragraphs(spec.get("description", [])):
            lines += [text, ""]
        lines += ["```shell", spec["examples"].rstrip(), "```", ""]
        lines += ["| Variable | Type | Default | Description |", "|---|---|---|---|", *rows(spec["options"]), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    TARGET.write_text(page())
    print(f"wrote {TARGET.relative_to(ROOT)}")
