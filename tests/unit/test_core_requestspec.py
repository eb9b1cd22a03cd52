"""What a request asks for (core/maintenance/requestspec.py): compared by meaning, and as the NVIDIA operator
stores it."""

from __future__ import annotations

import re
from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import requestspec as rs
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import drain_options
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.requests import for_engine, nm_spec
from ansible_collections.nodeops.maintenance.plugins.module_utils.request_options import request_options
from hypothesis import given
from hypothesis import strategies as st

FULL = {
    "cordon": True,
    "waitForPodCompletion": {"podSelector": "", "timeoutSeconds": 0},
    "drainSpec": {
        "force": False,
        "deleteEmptyDir": False,
        "podSelector": "",
        "timeoutSeconds": 300,
        "podEvictionFilters": [],
    },
}


def test_zero_values_without_a_default_are_left_out_and_the_rest_kept() -> None:
    assert rs.canonical(FULL) == {"cordon": True, "waitForPodCompletion": {}, "drainSpec": {"timeoutSeconds": 300}}
    # a wait with no sub-field still asks to wait; a timeout of 0 is kept (the CRD would default it to 300)
    kept = {"cordon": False, "drainSpec": {"timeoutSeconds": 0, "force": True}}
    assert rs.canonical(kept) == kept
    assert rs.canonical({"requestorID": "a", "nodeName": "n", "drainSpec": None}) == {}


def test_the_operators_write_back_reads_as_the_same_request() -> None:
    """What the operator leaves of a request after its first update is the request asked for: a re-run is
    unchanged (it used to be "updated" on every run, the operator undoing each update)."""
    stored = {"cordon": True, "drainSpec": {"force": True, "timeoutSeconds": 300}, "nodeName": "n"}
    wanted = {"cordon": True, "drainSpec": {**FULL["drainSpec"], "force": True}}
    assert all(rs.same_request(stored, wanted, key) for key in rs.REQUEST_FIELDS)
    assert not rs.same_request(stored, {"drainSpec": {"force": False, "timeoutSeconds": 300}}, "drainSpec")
    assert not rs.same_request({}, {"waitForPodCompletion": {}}, "waitForPodCompletion")  # waiting or not


def test_the_operator_serves_cordon_false_and_a_zero_drain_timeout_with_the_crd_defaults() -> None:
    stored, changes = rs.operator_stores({"cordon": False, "drainSpec": {"timeoutSeconds": 0, "force": True}})
    assert stored == {"cordon": True, "drainSpec": {"timeoutSeconds": 300, "force": True}}
    assert len(changes) == 2
    assert changes[0].startswith("cordon: false is served as true")
    assert changes[1].startswith("drain_spec.timeout_seconds: 0 (no limit) is served as 300")
    as_asked = {"cordon": True, "drainSpec": {"timeoutSeconds": 60}}
    assert rs.operator_stores(as_asked) == (as_asked, [])


def options(**given_options: Any) -> dict[str, Any]:
    """Module options with the argument spec's defaults, as AnsibleModule fills them."""
    out: dict[str, Any] = {"cordon": True, "wait_for_pod_completion": None, "drain_spec": None}
    out.update(given_options)
    for key in ("wait_for_pod_completion", "drain_spec"):
        if out[key] is not None:
            sub = request_options()[key]["options"]
            out[key] = {name: out[key].get(name, spec.get("default")) for name, spec in sub.items()}
    return out


def test_the_engines_get_what_was_asked_except_where_the_operator_differs() -> None:
    p = options(cordon=False, drain_spec={"force": True, "timeout_seconds": 0})
    spec = nm_spec(p)
    assert spec == {"cordon": False, "drainSpec": {"force": True, "timeoutSeconds": 0}}
    assert for_engine(spec, "builtin") == (spec, [])
    written, overrides = for_engine(spec, "operator")
    assert written == {"cordon": True, "drainSpec": {"force": True, "timeoutSeconds": 300}}
    assert len(overrides) == 2


requests = st.fixed_dictionaries(
    {
        "cordon": st.booleans(),
        "waitForPodCompletion": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={"podSelector": st.sampled_from(["", "app=a"]), "timeoutSeconds": st.integers(0, 900)},
            ),
        ),
        "drainSpec": st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {},
                optional={
                    "force": st.booleans(),
                    "deleteEmptyDir": st.booleans(),
                    "podSelector": st.sampled_from(["", "app=a"]),
                    "timeoutSeconds": st.integers(0, 900),
                    "podEvictionFilters": st.lists(
                        st.fixed_dictionaries({"byResourceNameRegex": st.sampled_from(["nvidia.com/gpu.*", "x"])}),
                        max_size=2,
                    ),
                },
            ),
        ),
    }
)


@given(requests)
def test_the_canonical_form_means_what_the_request_means(spec: dict[str, Any]) -> None:
    """Leaving the zero values out changes nothing the built-in engine reads, and is done once for all."""
    short = rs.canonical(spec)
    assert rs.canonical(short) == short
    assert all(rs.same_request(spec, short, key) for key in rs.REQUEST_FIELDS)
    for key in ("waitForPodCompletion", "drainSpec"):
        assert (spec[key] is None) == (key not in short)  # asking to wait or drain is kept
    if spec["drainSpec"] is not None:
        assert drain_options(short["drainSpec"], 4) == drain_options(spec["drainSpec"], 4)
        assert lc.drain_timeout(short["drainSpec"]) == lc.drain_timeout(spec["drainSpec"])
    if spec["waitForPodCompletion"] is not None:
        for field in ("podSelector", "timeoutSeconds"):
            assert (short["waitForPodCompletion"].get(field) or None) == (
                spec["waitForPodCompletion"].get(field) or None
            )


# ----------------------------------------------------------------------------------------- names
_DNS_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True)
_DNS_NAME = st.lists(_DNS_LABEL, min_size=1, max_size=6).map(".".join).filter(lambda name: len(name) <= 253)


def _valid_name(name: str) -> bool:
    """An object name as the API server checks it (a DNS-1123 subdomain: the pattern and the length)."""
    return (
        len(name) <= rs.MAX_NAME
        and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", name) is not None
    )


def test_a_request_is_named_after_its_prefix_and_node_then_numbered() -> None:
    assert rs.request_name("ops.example.com", "n1") == "ops.example.com-n1"
    assert rs.request_name("ops.example.com", "n1", 3) == "ops.example.com-n1-3"
    taken = {"ops.example.com-n1", "ops.example.com-n1-2"}
    assert rs.free_request_name("ops.example.com", "n1", taken) == "ops.example.com-n1-3"
    assert rs.free_request_name("ops.example.com", "n2", taken) == "ops.example.com-n2"


@given(_DNS_NAME, _DNS_NAME, st.integers(min_value=1, max_value=10_000))
def test_a_request_name_is_a_valid_object_name_for_any_prefix_and_node(prefix: str, node: str, number: int) -> None:
    name = rs.request_name(prefix, node, number)
    assert _valid_name(name), name
    assert name == rs.request_name(prefix, node, number), "the same node always gets the same name"
    if len(prefix) + len(node) + 1 + (len(str(number)) + 1 if number > 1 else 0) <= rs.MAX_NAME:
        assert name == f"{prefix}-{node}" + (f"-{number}" if number > 1 else "")


def test_names_too_long_for_an_object_differ_by_node_and_number() -> None:
    prefix = "maintenance." + "a" * 60 + ".example.com"
    nodes = ["b" * 63 + "." + "c" * 63 + "." + "d" * 60 + suffix for suffix in ("0", "1")]
    names = {rs.request_name(prefix, node, number) for node in nodes for number in (1, 2)}
    assert len(names) == 4 and all(_valid_name(name) for name in names)


def test_a_long_name_cut_at_a_dot_or_a_dash_is_still_a_valid_name() -> None:
    for filler in ("-", "."):
        # the cut falls right after the filler: the head must not end with it
        node = "n" * (rs.MAX_NAME - 17 - len("p-") - 1) + filler + "x" * 40
        name = rs.request_name("p", node, 1)
        assert _valid_name(name), name
