"""core/maintenance/notify.py: the event's default text, the Slack payload, the webhook payload, the URL as shown,
retries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import notify
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.node.errors import NodeopsError
from hypothesis import given
from hypothesis import strategies as st

WAVE_END = {
    "event": "wave_end",
    "run_id": "CHG-1",
    "wave": 2,
    "nodes": ["gpu-1", "gpu-2", "gpu-3"],
    "failures": {"gpu-2": "firmware update failed"},
    "counts": {"pending": 3, "maintaining": 0, "done": 2, "failed": 1},
}


def test_default_texts_name_the_run_the_wave_and_the_nodes() -> None:
    start = {"event": "wave_start", "run_id": "CHG-1", "wave": 1, "nodes": ["a", "b"], "counts": {"pending": 4}}
    assert notify.default_text(start) == "Run CHG-1: wave 1 starts: a, b (nodes: pending 4)."
    assert notify.default_text(WAVE_END) == (
        "Run CHG-1: wave 2 ended: maintained gpu-1, gpu-3; failed gpu-2 (nodes: pending 3, done 2, failed 1)."
    )
    failed = {
        "event": "node_failed",
        "run_id": "CHG-1",
        "wave": 2,
        "nodes": ["gpu-2"],
        "failures": WAVE_END["failures"],
    }
    assert notify.default_text(failed) == "Run CHG-1: node gpu-2 failed in wave 2: firmware update failed"
    end = {"event": "run_end", "run_id": "CHG-1", "counts": {"done": 5, "failed": 1}, "failures": {"gpu-2": "x"}}
    assert notify.default_text(end) == "Run CHG-1 ended (nodes: done 5, failed 1); failed: gpu-2."
    assert notify.default_text({"event": "custom"}) == "Run -: custom."


def test_a_long_node_list_is_cut_with_a_count() -> None:
    assert notify.listed([f"n{i}" for i in range(25)], limit=3) == "n0, n1, n2 and 22 more"
    assert notify.listed([]) == "-"


def test_the_message_given_wins_over_the_default() -> None:
    assert notify.message({"event": "run_end", "message": " all good "}) == "all good"
    assert notify.message({"event": "run_end", "message": ""}).startswith("Run - ended")


@pytest.mark.parametrize(
    ("event", "complaint"),
    [
        ([], "must be a mapping"),
        ({}, "must name the event"),
        ({"event": " "}, "must name the event"),
        ({"event": "wave_start", "nodes": "a,b"}, "nodes must be a list"),
        ({"event": "wave_start", "failures": ["a"]}, "failures must be a mapping"),
        ({"event": "wave_start", "counts": 3}, "counts must be a mapping"),
    ],
)
def test_a_wrong_event_is_refused_naming_the_field(event: Any, complaint: str) -> None:
    with pytest.raises(notify.NotifyError, match=complaint) as info:
        notify.check_event(event)
    assert isinstance(info.value, NodeopsError) and isinstance(info.value, ValueError)


def test_slack_payload_has_text_and_blocks_with_the_fields_and_the_failures() -> None:
    body = notify.slack_payload(WAVE_END)
    assert body["text"] == notify.default_text(WAVE_END)
    assert "Wave 2 ended" in body["blocks"][0]["text"]["text"]
    fields = [f["text"] for f in body["blocks"][1]["fields"]]
    assert fields == [
        "*Run*\nCHG-1",
        "*Wave*\n2",
        "*Nodes*\ngpu-1, gpu-2, gpu-3",
        "*Counts*\npending 3, done 2, failed 1",
    ]
    assert body["blocks"][2]["text"]["text"] == "*Failures*\n• gpu-2: firmware update failed"


def test_slack_text_escapes_what_slack_would_read_as_markup() -> None:
    body = notify.slack_payload({"event": "node_failed", "nodes": ["n<1>"], "failures": {"n<1>": "a & <b>"}})
    text = json.dumps(body)
    assert "<" not in text and ">" not in text
    assert "a &amp; &lt;b&gt;" in body["text"]


names = st.text(min_size=1, max_size=300)
events = st.fixed_dictionaries(
    {"event": st.sampled_from([*notify.EVENTS, "custom"])},
    optional={
        "run_id": names,
        "wave": st.one_of(st.none(), st.integers(min_value=0, max_value=10**6)),
        "nodes": st.lists(names, max_size=80),
        "failures": st.dictionaries(names, st.text(max_size=3000), max_size=40),
        "counts": st.dictionaries(
            st.sampled_from(["pending", "maintaining", "done", "failed", "x"]), st.integers(0, 10**6)
        ),
        "message": st.text(max_size=5000),
    },
)


@given(events)
def test_any_event_makes_a_slack_payload_within_slacks_limits(event: dict[str, Any]) -> None:
    body = notify.slack_payload(event)
    json.dumps(body)
    assert body["text"] and len(body["text"]) <= notify.SLACK_TEXT_LIMIT
    assert 1 <= len(body["blocks"]) <= 50
    for block in body["blocks"]:
        if "text" in block:
            assert 0 < len(block["text"]["text"]) <= notify.SLACK_TEXT_LIMIT
        for f in block.get("fields", []):
            assert 0 < len(f["text"]) <= notify.SLACK_FIELD_LIMIT
        assert len(block.get("fields", [])) <= notify.SLACK_MAX_FIELDS
    for piece in [body["text"]] + [b["text"]["text"] for b in body["blocks"] if "text" in b]:
        assert "<" not in piece and ">" not in piece


@given(events)
def test_the_webhook_payload_is_the_event_with_its_message(event: dict[str, Any]) -> None:
    body = notify.payload("webhook", event)
    assert {k: v for k, v in body.items() if k != "message"} == {k: v for k, v in event.items() if k != "message"}
    assert body["message"] == notify.message(event)


def test_a_body_given_is_sent_as_it_is() -> None:
    assert notify.payload("slack", WAVE_END, {"text": "mine"}) == {"text": "mine"}
    assert notify.payload("webhook", {}, '{"a": [1]}') == {"a": [1]}
    assert notify.payload("webhook", {}, [1, 2]) == [1, 2]
    for fmt, body, complaint in [
        ("webhook", "{not json", "body is text but not JSON"),
        ("webhook", 3, "body must be a mapping"),
        ("webhook", None, "give the event"),
        ("teams", None, "format must be one of"),
    ]:
        with pytest.raises(notify.NotifyError, match=complaint):
            notify.payload(fmt, {}, body)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T00/B00/XXXXsecret", "hooks.slack.com/services/… (https)"),
        ("http://user:pw@127.0.0.1:8080/hook?token=abc", "127.0.0.1:8080/hook/… (http)"),
        ("http://example.com", "example.com/ (http)"),
        ("https://[::1]:9/a", "[::1]:9/a (https)"),
        ("http://h:99999999/", "<an invalid URL>"),
    ],
)
def test_the_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert notify.display_url(url) == shown


segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.~", min_size=1, max_size=20)


@given(
    st.sampled_from(["http", "https"]),
    st.from_regex(r"\A[a-z][a-z0-9.-]{0,30}\Z"),
    st.lists(segment, min_size=1, max_size=4),  # the first segment is shown, the rest is not
    st.booleans(),
    st.booleans(),
)
def test_the_url_shown_holds_no_secret_part(scheme: str, host: str, path: list[str], user: bool, query: bool) -> None:
    url = f"{scheme}://{'me:SECRETpw@' if user else ''}{host}/{'/'.join([*path, 'SECRETpath'])}"
    url += "?token=SECRETq" if query else ""
    shown = notify.display_url(url)
    assert "SECRET" not in shown and url not in shown and "://" not in shown
    assert shown.startswith(host.lower()) and shown.endswith(f"({scheme})")


@given(st.text())
def test_any_text_as_url_is_shown_without_the_scheme_separator(url: str) -> None:
    assert "://" not in notify.display_url(url)


def test_only_http_urls_with_a_host() -> None:
    assert notify.check_url("https://h/x") == "https://h/x"
    for url in ["", None, "ftp://h/x", "https:///x", "http://h:port/"]:
        with pytest.raises(notify.NotifyError, match="url"):
            notify.check_url(url)


def test_which_answers_are_tried_again() -> None:
    assert [s for s in (None, 200, 204, 301, 400, 401, 404, 408, 429, 500, 503, 599) if notify.retryable(s)] == [
        None,
        408,
        429,
        500,
        503,
        599,
    ]


@given(st.integers(min_value=1, max_value=100), st.floats(min_value=0, max_value=100))
def test_backoff_doubles_up_to_the_cap(attempt: int, delay: float) -> None:
    wait = notify.backoff(attempt, delay, cap=30)
    assert 0 <= wait <= 30
    assert wait == min(30, delay * 2 ** (attempt - 1)) or delay == 0
    assert notify.backoff(attempt + 1, delay, cap=30) >= wait
