"""The AWX/AAP survey specifications (awx/surveys/<playbook>.json) against their playbooks' argument specs.

Every survey variable is an option of playbooks/<playbook>.meta.yml; every answer the survey lets through (each
choice, the bounds of a number, the default) passes the spec's check as the playbook's first tasks make it
(ansible.builtin.validate_argument_spec, the same validator); a variable the spec requires is a required question;
a variable with choices is a multiple choice of exactly those.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

ROOT = Path(__file__).resolve().parents[2]
SURVEYS = sorted((ROOT / "awx" / "surveys").glob("*.json"))
# AWX survey question types, and the spec types their answers may go to
ANSWER_TYPES = {
    "text": {"str", "raw", "path"},
    "textarea": {"str", "raw", "path"},
    "password": {"str", "raw"},
    "integer": {"int", "float", "raw"},
    "float": {"float", "raw"},
    "multiplechoice": {"str", "raw", "bool"},
}


def spec_of(playbook: str) -> dict[str, Any]:
    options = yaml.safe_load((ROOT / "playbooks" / f"{playbook}.meta.yml").read_text())["argument_specs"]["main"]
    return options["options"]


def validator(options: dict[str, Any]) -> ArgumentSpecValidator:
    def strip(option: dict[str, Any]) -> dict[str, Any]:
        kept = {key: value for key, value in option.items() if key not in ("description", "default")}
        if "options" in kept:
            kept["options"] = {name: strip(sub) for name, sub in kept["options"].items()}
        return kept

    return ArgumentSpecValidator({name: strip(option) for name, option in options.items()})


def answers(question: dict[str, Any]) -> list[Any]:
    """Answers the survey accepts for a question: its default, each choice, the bounds of a number."""
    found = [question["default"]] if question.get("default") not in (None, "") or not question["required"] else []
    if question["type"] == "multiplechoice":
        found += question["choices"]
    if question["type"] in ("integer", "float"):
        found += [question["min"], question["max"]]
    return found


@pytest.mark.parametrize("survey", SURVEYS, ids=[path.stem for path in SURVEYS])
def test_survey_variables_match_the_playbook_argument_spec(survey: Path) -> None:
    spec = json.loads(survey.read_text())
    options = spec_of(survey.stem)
    assert spec["name"] and spec["spec"]
    check = validator(options)
    variables = [question["variable"] for question in spec["spec"]]
    assert len(variables) == len(set(variables)), "a variable asked twice"
    required = {name for name, option in options.items() if option.get("required")}
    assert required <= set(variables), "a required variable has no question"
    for question in spec["spec"]:
        name = question["variable"]
        assert name in options, f"{survey.name}: {name} is not a variable of playbooks/{survey.stem}.yml"
        option = options[name]
        assert option.get("type", "str") in ANSWER_TYPES[question["type"]], name
        if option.get("required"):
            assert question["required"], f"{name} is required by the playbook"
        if "choices" in option:
            assert question["type"] == "multiplechoice" and question["choices"] == option["choices"], name
        if option.get("type") == "bool":
            assert question["type"] == "multiplechoice" and set(question["choices"]) == {"true", "false"}, name
        if question["type"] == "multiplechoice":
            assert question["default"] in question["choices"], name
        # AWX sends every answer as an extra variable; the playbook's first task checks it against the spec
        base = {other: "x" for other in required}
        for answer in answers(question):
            result = check.validate({**base, name: answer})
            assert not result.error_messages, f"{survey.name}: {name}={answer!r}: {result.error_messages}"


def test_every_job_template_survey_has_a_file() -> None:
    assert {path.stem for path in SURVEYS} == {"rolling_maintenance", "remediate"}
