"""What a request waits for, when the status cannot say what blocks its drain (engines/requests.py)."""

from __future__ import annotations

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import lifecycle as lc
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.maintenance import PassReport
from ansible_collections.nodeops.maintenance.plugins.module_utils.engines.requests import (
    Action,
    Requests,
    RequestSpec,
)


class Events:
    """A client whose only answer is a list of events (a field selector is not applied: the code must filter)."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.selectors: list[str] = []

    def list(self, res: Any, namespace: str | None = None, **kw: Any) -> dict[str, Any]:
        self.selectors.append(kw.get("field_selector") or "")
        return {"items": self.events}


def draining(started: str, drain: dict[str, Any] | None = None) -> Action:
    obj = {
        "metadata": {
            "name": "a-n0",
            "namespace": "ns",
            "uid": "u1",
            "annotations": {lc.DRAIN_START_ANNOTATION: started},
        },
        "spec": {"requestorID": "a", "nodeName": "n0"},
        "status": {
            "conditions": [{"type": "Ready", "status": "False", "reason": lc.PHASE_DRAINING}],
            "drain": drain or {"totalPods": 1},
        },
    }
    return Action("n0", "created", "ns", "a-n0", obj)


def event(message: str, when: str, version: str) -> dict[str, Any]:
    return {"message": message, "lastTimestamp": when, "metadata": {"resourceVersion": version}}


def requests(client: Any) -> Requests:
    return Requests(client, RequestSpec("a", "ns", "a"))


def test_the_last_blocker_of_the_current_attempt_is_named_and_an_older_one_is_not() -> None:
    old = event("eviction refused by PodDisruptionBudget ns/old for pod(s) ns/p", "2027-01-15T07:00:00Z", "5")
    now = event("eviction refused by PodDisruptionBudget ns/pdb for pod(s) ns/q", "2027-01-15T08:00:01Z", "9")
    client = Events([now, old])
    text = requests(client).explain(draining("2027-01-15T08:00:00.500000Z"))
    assert text.endswith("(eviction refused by PodDisruptionBudget ns/pdb for pod(s) ns/q)"), text
    assert client.selectors == ["involvedObject.name=a-n0,reason=EvictionBlocked,involvedObject.uid=u1"]
    # an attempt that began after the last event: the blocker has gone (the drain is only slow)
    assert "refused" not in requests(Events([old])).explain(draining("2027-01-15T08:00:00Z"))


def test_a_status_that_names_the_blocker_needs_no_event() -> None:
    client = Events([event("older", "2027-01-15T08:00:01Z", "9")])
    drain = {"totalPods": 1, "blockingPods": ["ns/q"], "blockingPDBs": ["ns/pdb"]}
    text = requests(client).explain(draining("2027-01-15T08:00:00Z", drain))
    assert "ns/q" in text and client.selectors == []


def test_a_pass_that_waited_for_the_lease_is_no_warning_and_others_are_kept_once() -> None:
    r = requests(Events([]))
    r.note(PassReport(busy=True, warnings=["Another reconcile pass holds the Lease"]))
    r.note(PassReport(warnings=["dropped fields", "dropped fields"]))
    r.note(PassReport(warnings=["dropped fields", "other"]))
    assert r.warnings == ["dropped fields", "other"]
