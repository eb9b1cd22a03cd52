"""The strict reader (core/strict.py) and its CEL subset (core/cel.py): the CRDs in the collection are its single
source, and each kind of mistake is named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core import cel, strict
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.crd_schemas import SCHEMAS
from hypothesis import given
from hypothesis import strategies as st
from support import crd_schemas
from support.specs import NHC

ROOT = Path(__file__).resolve().parents[2]


def test_the_schemas_are_generated_from_the_crds_in_the_collection() -> None:
    assert crd_schemas.schemas() == SCHEMAS, "a CRD changed: run make crd-schemas"
    assert set(SCHEMAS) == {
        "MaintenanceOperatorConfig",
        "NodeHealthCheck",
        "NodeMaintenance",
        "SelfNodeRemediation",
        "SelfNodeRemediationConfig",
        "SelfNodeRemediationTemplate",
    }


def all_rules(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [entry["rule"] for entry in node.get("x-kubernetes-validations") or []]
        return found + [rule for value in node.values() for rule in all_rules(value)]
    if isinstance(node, list):
        return [rule for item in node for rule in all_rules(item)]
    return []


def test_every_crd_rule_is_read_except_the_transition_rules() -> None:
    """A rule this reader cannot evaluate is left to the API server; only rules about an update (oldSelf) may
    be such, so that a new rule in a CRD is either enforced offline or fails here."""
    left = []
    for rule in all_rules(SCHEMAS):
        try:
            cel.compile_rule(rule)
        except cel.Unsupported:
            left.append(rule)
    assert left and all("oldSelf" in rule for rule in left), left


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("type(self) == int || self.matches('^[0-9]+%$')", 3, True),
        ("type(self) == int || self.matches('^[0-9]+%$')", "30%", True),
        ("type(self) == int || self.matches('^[0-9]+%$')", "30", False),
        ("type(self) == int ? self >= 0 : self.matches('^(100|[0-9]{1,2})%$')", -1, False),
        ("type(self) == int ? self >= 0 : self.matches('^(100|[0-9]{1,2})%$')", "101%", False),
        ("duration(self) >= duration('10ms')", "5ms", False),
        ("duration(self) >= duration('10ms')", "1s", True),
        ("has(self.minHealthy) != has(self.maxUnhealthy)", {"minHealthy": 1}, True),
        ("has(self.minHealthy) != has(self.maxUnhealthy)", {}, False),
        ("self.kind.endsWith('Template')", {"kind": "X"}, False),
        ("(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)", {"operator": "In"}, 0),
        ("!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''", {}, True),
    ],
)
def test_cel_subset(rule: str, value: Any, expected: bool) -> None:
    assert cel.compile_rule(rule)(value) is bool(expected)


def test_cel_outside_the_subset_is_unsupported() -> None:
    for rule in ("self == oldSelf", "self.all(x, x > 0)", "1 +", "self.foo()"):
        with pytest.raises(cel.Unsupported):
            cel.compile_rule(rule)


def message(kind: str, spec: Any) -> str:
    with pytest.raises(strict.InputError) as err:
        strict.check_spec(kind, spec)
    return str(err.value)


def test_a_valid_spec_passes() -> None:
    strict.check_spec("NodeHealthCheck", NHC)


def test_a_typo_names_the_field_and_the_closest_known_one() -> None:
    spec = {k: v for k, v in NHC.items() if k != "minHealthy"} | {"minHealty": "51%"}
    assert message("NodeHealthCheck", spec).startswith("spec.minHealty: unknown field; did you mean minHealthy?")


def test_snake_case_in_an_object_points_to_the_camel_case_name() -> None:
    got = message("SelfNodeRemediationConfig", {"safe_time_to_assume_node_rebooted_seconds": 30})
    assert got == (
        "spec.safe_time_to_assume_node_rebooted_seconds: unknown field; did you mean "
        "safeTimeToAssumeNodeRebootedSeconds? (objects take the CRD's camelCase names)"
    )


def test_a_quoted_number_is_a_string_as_for_the_api_server() -> None:
    got = message("SelfNodeRemediationConfig", {"safeTimeToAssumeNodeRebootedSeconds": "30"})
    assert 'must be a whole number, not the string "30" (a number in quotes; write it without quotes)' in got


def test_a_cel_rule_of_the_crd_is_applied() -> None:
    got = message("NodeHealthCheck", {**NHC, "minHealthy": "120%"})
    assert (
        got == 'spec.minHealthy: the string "120%" is refused: minHealthy must be a number of 0 or more or a percentage'
        " from 0% to 100%."
    )


def test_nested_paths_and_enums() -> None:
    spec = {**NHC, "selector": {"matchExpressions": [{"key": "k", "operator": "exists"}]}}
    got = message("NodeHealthCheck", spec)
    assert got.startswith('spec.selector.matchExpressions[0].operator: the string "exists" is not one of')
    assert got.endswith("did you mean Exists?")


def test_null_counts_as_left_out_but_not_for_a_required_field() -> None:
    strict.check_spec("NodeHealthCheck", {**NHC, "pauseRequests": None})
    assert "spec.selector: required" in message("NodeHealthCheck", {**NHC, "selector": None})


def test_objects_of_other_kinds_pass_untouched() -> None:
    strict.check_object({"kind": "Node", "spec": {"anything": 1}}, "nodes[0]")


names = st.sampled_from(sorted(SCHEMAS["NodeHealthCheck"]["schema"]["properties"]["spec"]["properties"]))


@given(names, st.integers(0, 10), st.sampled_from(["drop", "double", "swap", "upper"]))
def test_property_a_misspelt_field_is_never_accepted(name: str, at: int, how: str) -> None:
    """Any one-letter slip of a known field name is refused and named; a slip that lands on another known
    field is that field, not a slip."""
    at = at % len(name)
    typo = {
        "drop": name[:at] + name[at + 1 :],
        "double": name[:at] + name[at] + name[at:],
        "swap": name[:at] + name[at + 1 : at + 2] + name[at : at + 1] + name[at + 2 :],
        "upper": name.upper(),
    }[how]
    known = SCHEMAS["NodeHealthCheck"]["schema"]["properties"]["spec"]["properties"]
    if typo in known:
        return
    got = message("NodeHealthCheck", {**NHC, typo: NHC.get(name, 1)})
    assert f"spec.{typo}: unknown field" in got


# -- playbook variables ----------------------------------------------------------------------------------------

AGENT = ["node_agent_hosts", "node_agent_serial", "node_agent_api_server", "kubeconfig", "context"]


def test_variable_prefixes_are_the_shared_starts_of_the_known_names() -> None:
    assert strict.variable_prefixes(AGENT) == ["node_agent_"]
    assert strict.variable_prefixes(["crds_namespace", "crds_create_namespace", "kubeconfig"]) == ["crds_"]
    assert strict.variable_prefixes(["kubeconfig", "context", "rolling_run_id"]) == []


@pytest.mark.parametrize(
    ("given", "unknown"),
    [
        # another case, camelCase, a letter left out: named with the known one they stand for
        (["node_agent_Serial"], {"node_agent_Serial": "node_agent_serial"}),
        (["node_agent_apiServer"], {"node_agent_apiServer": "node_agent_api_server"}),
        (["node_agent_host"], {"node_agent_host": "node_agent_hosts"}),
        # nothing near: named alone (the shared prefix alone does not make two names alike)
        (["node_agent_zzz"], {"node_agent_zzz": None}),
        # other variables are not the playbook's: an inventory's node_name, Ansible's own, a known one
        (["node_name", "ansible_host", "inventory_hostname", "node_agent_hosts", "kubeconfig"], {}),
    ],
)
def test_unknown_variables_are_those_named_like_the_known_ones(
    given: list[str], unknown: dict[str, str | None]
) -> None:
    found = strict.unknown_variables(given, AGENT)
    assert set(found) == set(unknown)
    for name, hint in unknown.items():
        assert found[name].startswith(f"{name} is not a variable of this playbook")
        assert found[name].endswith(f"; did you mean {hint}?" if hint else ".")


def test_unknown_variables_with_given_prefixes() -> None:
    assert strict.unknown_variables(["upgrade_verison", "node_agent_x"], ["upgrade_version"], ["upgrade_"]) == {
        "upgrade_verison": "upgrade_verison is not a variable of this playbook; did you mean upgrade_version?"
    }


def test_a_typo_under_an_option_given_by_its_alias_is_named_once() -> None:
    spec = {"drain_spec": {"type": "dict", "aliases": ["drainSpec"], "options": {"timeout_seconds": {"type": "int"}}}}
    nested = {"timeout_secs": 5}
    # Ansible's params hold the option under its name and under the alias the task used
    hints = strict.option_hints(spec, {"drain_spec": nested, "drainSpec": nested, "cordn": True})
    assert hints == [
        "drain_spec.timeout_secs: unknown option; did you mean timeout_seconds?",
        "cordn: unknown option.",
    ]


def test_a_snapshot_names_the_problems_of_every_bad_object_not_only_the_first() -> None:
    def nm(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "kind": "NodeMaintenance",
            "metadata": {"name": name, "namespace": "ops"},
            "spec": {"nodeName": "n0", "requestorID": "a.example.com", **spec},
        }

    snapshot = {"NodeMaintenance": [nm("a", cordn=True), nm("good"), nm("b", drainSpec={"force": "yes"})]}
    with pytest.raises(strict.InputError) as info:
        strict.check_snapshot(snapshot)
    message = str(info.value)
    assert "snapshot NodeMaintenance ops/a.spec.cordn: unknown field; did you mean cordon?" in message
    assert "snapshot NodeMaintenance ops/b.spec.drainSpec.force: must be true or false" in message
    assert "ops/good" not in message
