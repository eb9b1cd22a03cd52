# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The steps of nodeops.maintenance.rolling_maintenance: its argument spec and what each step does, for the module
(which runs them where the task runs) and for its action (which runs admit and release on the controller)."""

from __future__ import annotations

from functools import partial
from typing import Any

from .core import strict
from .core.maintenance.gates import (
    POD_SCOPES,
    compile_alert_filter,
)
from .core.maintenance.rolling import (
    INTERRUPTED_POLICIES,
    RollingError,
    record_name,
)
from .core.maintenance.window import parse_window
from .core.node.errors import NodeopsError
from .engines.maintenance import (
    ReconcileOptions,
)
from .engines.requests import (
    RequestError,
    for_engine,
    nm_spec,
)
from .engines.rolling import (
    STEP_OF_WAIT,
    WAIT_PHASES,
    GateOptions,
    Rolling,
    RunOptions,
)
from .engines.rolling_results import (
    StepResult,
)
from .k8s.client import NODES
from .prometheus import alerts as prometheus_alerts
from .prometheus import check_url
from .reconcile_options import reconcile_options
from .request_options import request_options

ARGUMENT_SPEC: dict[str, Any] = {
    "step": {
        "type": "str",
        "required": True,
        "choices": ["start", "summary", "window", "admit", "release", "drive", "stop"],
    },
    "run_id": {"type": "str", "required": True},
    "node_names": {"type": "list", "elements": "str", "default": []},
    "node_selector": {"type": "str"},
    **request_options(),
    **reconcile_options(),
    "engine": {"type": "str", "choices": ["builtin", "operator"], "default": "builtin"},
    "interrupted": {"type": "str", "choices": list(INTERRUPTED_POLICIES), "default": "release"},
    "retry_failed": {"type": "bool", "default": False},
    "defer_requests": {"type": "bool", "default": False},
    "node": {"type": "str"},
    "failure": {"type": "str"},
    "stop_reason": {"type": "str"},
    "timing": {"type": "list", "elements": "float"},
    "gather_seconds": {"type": "float", "default": 30},
    "wave_timeout": {"type": "float", "default": 3600},
    "node_ready_timeout": {"type": "float", "default": 600},
    "release_timeout": {"type": "float", "default": 300},
    "release_failed": {"type": "bool", "default": False},
    "max_fail_percentage": {"type": "float", "default": 0},
    "poll_interval": {"type": "float", "default": 0.5},
    "workers": {"type": "int", "default": 16},
    "window": {
        "type": "dict",
        "options": {
            "days": {"type": "list", "elements": "str", "default": []},
            "start": {"type": "str"},
            "end": {"type": "str"},
            "time_zone": {"type": "str", "default": "UTC"},
        },
    },
    "gates": {
        "type": "dict",
        "options": {
            "pod_selector": {"type": "str"},
            "pod_scope": {"type": "str", "choices": list(POD_SCOPES), "default": "wave"},
            "prometheus_url": {"type": "str"},
            "alert_filter": {"type": "str", "default": ".*"},
            "pending_alerts": {"type": "bool", "default": False},
            "validate_certs": {"type": "bool", "default": True},
            "check_failure": {"type": "str"},
            "tasks": {"type": "bool", "default": False},
        },
    },
    "gate_timeout": {"type": "float", "default": 3600},
    "gate_interval": {"type": "float", "default": 30},
    "progress_after": {"type": "float", "default": 0},
    "resume": {
        "type": "dict",
        "options": {
            "phase": {"type": "str", "choices": list(WAIT_PHASES), "required": True},
            "since": {"type": "float", "required": True},
            "nodes": {"type": "list", "elements": "str"},
        },
    },
}

POSITIVE = (
    "gather_seconds",
    "wave_timeout",
    "node_ready_timeout",
    "release_timeout",
    "poll_interval",
    "step_timeout",
    "gate_timeout",
    "gate_interval",
)


def run_options(p: dict[str, Any]) -> tuple[RunOptions, list[str]]:
    """The options, checked (ValueError says what is wrong), and what the engine serves differently."""
    for name in POSITIVE:
        if p[name] < 0 or (name != "gather_seconds" and p[name] == 0):
            raise ValueError(f"{name} must be more than 0 (got {p[name]:g}).")
    if not 0 <= p["max_fail_percentage"] <= 100:
        raise ValueError(f"max_fail_percentage must be between 0 and 100 (got {p['max_fail_percentage']:g}).")
    if p["workers"] < 1:
        raise ValueError("workers must be at least 1.")
    if p["progress_after"] < 0:
        raise ValueError(f"progress_after must be 0 (wait to the end) or more (got {p['progress_after']:g}).")
    try:
        record_name(p["run_id"])
    except RollingError as exc:
        raise ValueError(str(exc)) from None
    reconcile = ReconcileOptions(
        namespace=p["namespace"],
        config_namespace=p["config_namespace"],
        step_budget=p["step_timeout"],
        workers=p["workers"],
    )
    spec, overrides = for_engine(nm_spec(p), p["engine"])
    # the requests' spec as the API server will check it (the node name is each node's, checked by the API)
    strict.check_spec("NodeMaintenance", {**spec, "requestorID": p["requestor"], "nodeName": "node"})
    window_p = p["window"] or {}
    window = parse_window(window_p.get("days"), window_p.get("start"), window_p.get("end"), window_p.get("time_zone"))
    options = RunOptions(
        run_id=p["run_id"],
        requestor=p["requestor"],
        namespace=p["namespace"],
        record_namespace=p["config_namespace"],
        spec=spec,
        name_prefix=p["name_prefix"],
        engine=p["engine"],
        reconcile=reconcile,
        interval=p["poll_interval"],
        gather=p["gather_seconds"],
        wave_timeout=p["wave_timeout"],
        node_ready_timeout=p["node_ready_timeout"],
        release_timeout=p["release_timeout"],
        release_failed=p["release_failed"],
        max_fail_percentage=p["max_fail_percentage"],
        window=window,
        gates=gate_options(p),
        progress_after=p["progress_after"],
    )
    return options, overrides


def gate_options(p: dict[str, Any]) -> GateOptions | None:
    """The gates, checked (ValueError says what is wrong); None without any."""
    g = p["gates"] or {}
    options = GateOptions(
        pod_selector=(g.get("pod_selector") or "").strip(),
        pod_scope=g.get("pod_scope") or "wave",
        prometheus_url=(g.get("prometheus_url") or "").strip(),
        alert_filter=g.get("alert_filter") or ".*",
        pending_alerts=bool(g.get("pending_alerts")),
        validate_certs=g.get("validate_certs") is not False,
        check_failure=(g.get("check_failure") or "").strip(),
        tasks=bool(g.get("tasks")),
        timeout=p["gate_timeout"],
        interval=p["gate_interval"],
    )
    if options.prometheus_url:
        check_url(options.prometheus_url)
    compile_alert_filter(options.alert_filter)
    return options if options.active else None


def targets(module: Any) -> list[str]:
    p = module.params
    names = list(p["node_names"])
    if p["node_selector"]:
        selected = module.client.list(NODES, label_selector=p["node_selector"])["items"]
        names += sorted(n["metadata"]["name"] for n in selected)
    return list(dict.fromkeys(names))


def run(module: Any) -> None:
    """The step the module's parameters name, ending in ``module.exit_json`` or ``module.fail_json``: a
    K8sModule, or the action's stand-in for one when the step runs on the controller."""
    p = module.params
    try:
        options, overrides = run_options(p)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if options.reconcile is not None:
        module.set_pool_size(options.reconcile.pool_size())
    step = p["step"]
    if step in ("admit", "release") and not p["node"]:
        module.fail_json(msg=f"step={step} takes one node: give node.")
    if step == "start":
        for sentence in overrides:
            module.warn(sentence)
    rolling: Rolling | None = None
    if step == "window":  # reads nothing in the cluster
        window = Rolling(None, options).window_state()  # type: ignore[arg-type]
        module.exit_json(changed=False, window=window, open=window is None or window["open"])
    try:
        # check mode: the same step on an overlay of the cluster that writes nothing and waits for nothing
        rolling = Rolling(module.client, options, fetch_alerts=prometheus_alerts, plan=module.check_mode)
        commit = getattr(module, "commit", None)  # the action's: its workers' changes of the record written together
        if commit is not None:
            # one group per record of one API server (two clusters may have runs of the same ID)
            server = getattr(module.client, "host", "")
            rolling.commit = partial(commit, f"{server} {options.record_namespace}/{rolling.name}")
        bell = getattr(module, "bell", None)  # the action's: between the run's driver and its nodes' steps
        if bell is not None and not module.check_mode:
            # one bell per requests' namespace of one API server (what the driver's passes serve)
            rolling.bell = bell(f"{getattr(module.client, 'host', '')} {options.namespace}")
        resume = p["resume"]
        if resume is not None and STEP_OF_WAIT[resume["phase"]] != step:
            module.fail_json(
                msg=f"resume with phase {resume['phase']!r} goes with step={STEP_OF_WAIT[resume['phase']]}, "
                f"not step={step}."
            )
        result: StepResult
        if step == "start":
            result = rolling.start(targets(module), p["interrupted"], p["retry_failed"], resume, p["defer_requests"])
            result.overrides = overrides
        elif step == "admit":
            result = rolling.admit(p["node"], resume)
        elif step == "release":
            result = rolling.release(p["node"], p["failure"] or None, p["timing"], resume)
        elif step == "drive":
            result = rolling.drive(getattr(module, "alive", lambda: True))
        elif step == "stop":
            result = rolling.stop(p["stop_reason"] or "")
        else:
            result = rolling.summary()
    except RequestError as exc:
        warn_passes(module, rolling)
        module.fail_json(msg=exc.msg, **exc.result)
    except NodeopsError as exc:
        warn_passes(module, rolling)
        module.fail_error(exc)
    warn_passes(module, rolling)
    rendered = result.as_dict()
    if module.check_mode:  # a plan's wait is not gone on with (what it did before is not written)
        rendered.pop("resume", None)
    module.exit_json(**rendered)


def warn_passes(module: Any, rolling: Rolling | None) -> None:
    """The warnings of the reconcile passes the step ran (each once)."""
    for warning in rolling.requests.warnings if rolling is not None else ():
        module.warn(warning)
