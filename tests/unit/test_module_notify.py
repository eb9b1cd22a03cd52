"""The notify module against a local HTTP server that records what it receives (tests/support/http_receiver.py):
what it sends, check mode, retries, error text, and no header value in its output."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.maintenance import notify as core
from ansible_collections.nodeops.maintenance.plugins.modules import notify
from support.http_receiver import DROP, Receiver

# ansible-core 2.19's helper; `make compat` (ansible-core 2.16) skips this file
patch_module_args = pytest.importorskip(
    "ansible.module_utils.testing", reason="ansible.module_utils.testing is new in ansible-core 2.19"
).patch_module_args

TOKEN = "Bearer s3cret-t0ken-value"
EVENT = {"event": "wave_start", "run_id": "CHG-7", "wave": 1, "nodes": ["gpu-1"], "counts": {"pending": 2}}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def run(capsys: pytest.CaptureFixture[str], check_mode: bool = False, **params: Any) -> tuple[dict[str, Any], str]:
    """The module's result and its whole output."""
    args = {"retry_delay": 0, "request_timeout": 5, **params, "_ansible_check_mode": check_mode}
    capsys.readouterr()
    with patch_module_args(args), pytest.raises(SystemExit):
        notify.main()
    out = capsys.readouterr().out
    return json.loads(out), out


def test_webhook_posts_the_event_as_json_with_the_headers(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out = run(capsys, url=receiver.url("/hook"), event=EVENT, headers={"Authorization": TOKEN})
    assert result["sent"] is True and result["changed"] is True and result["status"] == 200
    assert result["attempts"] == 1
    (got,) = receiver.received()
    assert (got.method, got.path) == ("POST", "/hook")
    assert got.headers["Content-Type"] == "application/json"
    assert got.headers["Authorization"] == TOKEN
    assert got.json == {**EVENT, "message": core.default_text(EVENT)}
    assert result["payload"] == got.json
    assert result["request"]["header_names"] == ["Authorization", "Content-Type"]
    assert "s3cret" not in out and receiver.url("/hook") not in out


def test_slack_posts_text_and_blocks(receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    result = run(capsys, url=receiver.url("/services/T0/B0/x"), format="slack", event=EVENT)[0]
    (got,) = receiver.received()
    assert got.json == core.slack_payload(EVENT) == result["payload"]
    assert result["request"]["url"] == f"127.0.0.1:{receiver.url('').rsplit(':', 1)[1]}/services/… (http)"


def test_a_body_of_ones_own_is_sent_as_it_is(receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, url=receiver.url(), body='{"summary": "wave 1", "n": [1]}', method="PUT")
    (got,) = receiver.received()
    assert got.method == "PUT" and got.json == {"summary": "wave 1", "n": [1]}


def test_check_mode_sends_nothing_and_shows_what_it_would(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    result, out = run(capsys, check_mode=True, url=receiver.url(), event=EVENT, headers={"Authorization": TOKEN})
    assert result["changed"] is True and result["sent"] is False and result["attempts"] == 0
    assert result["payload"]["event"] == "wave_start"
    assert receiver.received() == []
    assert "s3cret" not in out


def test_5xx_and_dropped_connections_are_tried_again(receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    receiver.answers("/hook", [503, DROP, 500])
    result = run(capsys, url=receiver.url(), event=EVENT, retries=3)[0]
    assert result["sent"] is True and result["attempts"] == 4
    assert [r.json["event"] for r in receiver.received()] == ["wave_start"] * 4


def test_retries_used_up_fail_naming_the_url_and_the_status_but_no_header(
    receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    receiver.answers("/hook/T1/secretpart", [503] * 3)
    url = receiver.url("/hook/T1/secretpart")
    result, out = run(capsys, url=url, event=EVENT, retries=2, headers={"X-Token": TOKEN})
    assert result["failed"] is True and result["sent"] is False and result["status"] == 503
    assert result["attempts"] == 3 and len(receiver.received()) == 3
    port = url.split(":")[2].split("/")[0]
    assert result["msg"].startswith(f"The notification to 127.0.0.1:{port}/hook/… (http) failed after 3 tries")
    assert "HTTP 503" in result["msg"]
    assert "s3cret" not in out and "secretpart" not in out and TOKEN not in out


def test_a_4xx_is_not_tried_again(receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    receiver.answers("/hook", [401])
    result = run(capsys, url=receiver.url(), event=EVENT, headers={"Authorization": TOKEN})[0]
    assert result["failed"] is True and result["attempts"] == 1 and result["status"] == 401
    assert "at the first try" in result["msg"] and "HTTP 401" in result["msg"] and "a token?" in result["msg"]
    assert result["response"] == "no luck"


def test_on_error_warn_succeeds_with_a_warning(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    warned: list[str] = []  # recorded here: Ansible's own warning list is global to the process
    monkeypatch.setattr(notify.AnsibleModule, "warn", lambda self, text: warned.append(text))
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run(capsys, url=f"http://127.0.0.1:{port}/hook", event=EVENT, retries=1, on_error="warn")[0]
    assert "failed" not in result and result["changed"] is False and result["sent"] is False
    assert result["attempts"] == 2 and "could not be reached" in result["error"]
    assert warned == [result["error"]]


@pytest.mark.parametrize(
    ("params", "complaint"),
    [
        ({"url": "ftp://x/y", "event": EVENT}, "url must be an http:// or https:// URL"),
        ({"url": "http://x/y", "event": {"nodes": []}}, "event.event must name the event"),
        ({"url": "http://x/y"}, "give the event"),
        ({"url": "http://x/y", "body": "{oops"}, "body is text but not JSON"),
        ({"url": "http://x/y", "event": EVENT, "retries": -1}, "retries and retry_delay must be 0 or more"),
    ],
)
def test_bad_input_sends_nothing_and_says_what_is_wrong(
    params: dict[str, Any], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, on_error="warn", **params)[0]
    assert result["failed"] is True
    assert result["msg"].startswith("Nothing sent: ") and complaint in result["msg"]
