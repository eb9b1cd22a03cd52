"""The argument specs of the playbooks (playbooks/<playbook>.meta.yml) and of the roles (meta/argument_specs.yml).

Statically: each spec documents every variable its playbook or role reads (found in the Jinja of its files), and
nothing else; its defaults are the values the playbook or role really uses (vars files, play vars, ``default()``
filters, role defaults), so the two cannot drift apart. Then through ``ansible-playbook``: a wrong variable fails
one of the first tasks, naming the variable, before any module talks to a cluster (the kubeconfig points nowhere,
so a task that reached one would fail differently), in check mode too; right variables pass those tasks.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jinja2 import Environment, nodes
from support import playbook_docs
from support.ansible_cli import BIN, clean_env

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"

# Each playbook and the files it runs (relative to playbooks/), the roles it imports (whose own spec covers their
# variables).
PLAYBOOK_FILES: dict[str, list[str]] = {
    "rolling_maintenance": [
        "rolling_maintenance.yml",
        "tasks/rolling_maintain.yml",
        "tasks/rolling_notify.yml",
        "tasks/rolling_gate.yml",
        "tasks/rolling_gate_check.yml",
        "tasks/rolling_push.yml",
        "tasks/rolling_nothing.yml",
        "maintenance/ssh_reboot.yml",
        "maintenance/simulated_reboot.yml",
        "maintenance/reboot_needed.yml",
    ],
    "remediate": ["remediate.yml", "tasks/remediate_pass.yml"],
    "reconcile": ["reconcile.yml"],
    "deploy_agent": ["deploy_agent.yml"],
    "install": ["install.yml"],
}
PLAYBOOK_ROLES = {"deploy_agent": ["node_agent"], "install": ["crds"]}
# Files every playbook shares, and the ones that hold no tasks.
SHARED_FILES = {"tasks/check_variables.yml"}
ROLES = ["node_agent", "crds"]

# Variables Ansible sets.
MAGIC = {
    "ansible_check_mode",
    "ansible_failed_result",
    "ansible_failed_task",
    "ansible_host",
    "ansible_play_hosts",
    "ansible_play_hosts_all",
    "ansible_playbook_python",
    "groups",
    "hostvars",
    "inventory_hostname",
    "item",
    "omit",
    "playbook_dir",
    "role_path",
}
# Variables a playbook sets for the templates its options may hold (rolling_notify_body reads nodeops_event); the
# first play sets a sample so that the checks can render them.
TEMPLATE_CONTEXT = {"nodeops_event"}
CONDITIONALS = {"when", "until", "changed_when", "failed_when", "that"}
JINJA = Environment()
JINJA.globals.update(dict.fromkeys(["lookup", "query", "q", "now"]))
TYPES = {"str", "int", "bool", "float", "list", "dict", "path", "raw"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def playbook_spec(name: str) -> dict[str, Any]:
    return dict(load(PLAYBOOKS / f"{name}.meta.yml")["argument_specs"]["main"]["options"])


def role_spec(role: str) -> dict[str, Any]:
    return dict(load(ROOT / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"])


def names_in(template: str) -> set[str]:
    """The variables a Jinja template reads (not those it sets itself, nor Jinja's and Ansible's functions), also
    another host's (``hostvars[host].name``)."""
    ast = JINJA.parse(template)
    loaded = {n.name for n in ast.find_all(nodes.Name) if n.ctx == "load"}
    stored = {n.name for n in ast.find_all(nodes.Name) if n.ctx in ("store", "param")}
    of_hosts = {
        n.attr
        for n in ast.find_all(nodes.Getattr)
        if isinstance(n.node, nodes.Getitem) and isinstance(n.node.node, nodes.Name) and n.node.node.name == "hostvars"
    }
    return (loaded - stored - set(JINJA.globals)) | of_hosts


def walk(data: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(key, value) for every value in ``data``, with the key of the mapping or list it is in."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield str(k), v
            yield from walk(v, str(k))
    elif isinstance(data, list):
        for v in data:
            yield key, v
            yield from walk(v, key)


def read_variables(data: Any) -> set[str]:
    """The variables that the templates and conditionals in a playbook, tasks file or vars file read."""
    found: set[str] = set()
    for key, value in walk(data):
        if not isinstance(value, str):
            continue
        if key in CONDITIONALS:
            found |= names_in("{{ " + value + " }}")
        elif "{{" in value or "{%" in value:
            found |= names_in(value)
    return found


def set_variables(data: Any) -> set[str]:
    """The variables a playbook or tasks file sets itself: registered, set_fact, add_host, loop_var, vars."""
    found: set[str] = set()
    for key, value in walk(data):
        if key in ("register", "loop_var") and isinstance(value, str):
            found.add(value)
        elif key in ("ansible.builtin.set_fact", "ansible.builtin.add_host", "vars") and isinstance(value, dict):
            found |= set(value)
    return found


def default_filters(text: str, name: str) -> list[Any]:
    """The values of every ``name | default(value)`` in ``text`` (``default(omit)`` is none)."""
    pattern = re.compile(rf"\b{re.escape(name)} \| default\(([^()]*)\)")
    return [yaml.safe_load(match.group(1)) for match in pattern.finditer(text) if match.group(1) != "omit"]


def first_play(name: str) -> dict[str, Any]:
    plays = load(PLAYBOOKS / PLAYBOOK_FILES[name][0])
    return dict(plays[0])


def internal_vars(name: str) -> dict[str, Any]:
    """The internal variables (a leading underscore) of the vars of the playbook's first play: the playbook sets
    them there (the rest are the defaults of its options), and reads what their values read."""
    return {k: v for k, v in (first_play(name).get("vars") or {}).items() if k.startswith("_")}


# -- the specs, statically -----------------------------------------------------------------------------------


def test_every_playbook_file_belongs_to_a_playbook() -> None:
    listed = {f for files in PLAYBOOK_FILES.values() for f in files} | SHARED_FILES
    on_disk = {str(p.relative_to(PLAYBOOKS)) for p in PLAYBOOKS.rglob("*.yml") if not p.name.endswith(".meta.yml")}
    assert on_disk == listed
    assert {p.name for p in PLAYBOOKS.glob("*.meta.yml")} == {f"{name}.meta.yml" for name in PLAYBOOK_FILES}


@pytest.mark.parametrize("name", sorted(PLAYBOOK_FILES))
def test_the_first_tasks_check_the_variables_against_the_spec(name: str) -> None:
    plays = load(PLAYBOOKS / PLAYBOOK_FILES[name][0])
    first = plays[0]["tasks"][0]
    assert first["ansible.builtin.import_tasks"] == "tasks/check_variables.yml"
    roles = {"nodeops_argument_spec_roles": PLAYBOOK_ROLES[name]} if name in PLAYBOOK_ROLES else {}
    assert first["vars"] == {"nodeops_argument_spec": f"{name}.meta.yml", **roles}


def check_options(options: dict[str, Any], where: str) -> None:
    for option, spec in options.items():
        label = f"{where}: {option}"
        assert spec.get("type") in TYPES, label
        assert spec.get("description"), label
        assert not (spec.get("required") and "default" in spec), label
        if "choices" in spec and "default" in spec:
            assert spec["default"] in spec["choices"], label
        assert ("elements" in spec) <= (spec["type"] == "list"), label
        if "options" in spec:
            check_options(spec["options"], label)


def test_the_playbooks_page_is_generated_from_the_specs() -> None:
    assert set(playbook_docs.ORDER) == set(PLAYBOOK_FILES)
    assert playbook_docs.TARGET.read_text() == playbook_docs.page(), "a spec changed: run make playbook-docs"


@pytest.mark.parametrize("name", sorted(PLAYBOOK_FILES))
def test_playbook_spec_is_well_formed(name: str) -> None:
    check_options(playbook_spec(name), name)


@pytest.mark.parametrize("role", ROLES)
def test_role_spec_is_well_formed(role: str) -> None:
    check_options(role_spec(role), role)


@pytest.mark.parametrize("name", sorted(PLAYBOOK_FILES))
def test_playbook_spec_documents_every_variable_the_playbook_reads(name: str) -> None:
    internal = internal_vars(name)
    files = [load(PLAYBOOKS / f) for f in PLAYBOOK_FILES[name]]
    reads = set().union(*(read_variables(data) for data in [*files, internal]))
    sets = set().union(*(set_variables(data) for data in files)) | set(internal)
    options = set(playbook_spec(name))
    from_roles = set().union(*(role_spec(role) for role in PLAYBOOK_ROLES.get(name, [])))
    play_vars = set(first_play(name).get("vars", {}))
    defaults = {v for v in play_vars if not v.startswith("_")} - TEMPLATE_CONTEXT  # a leading underscore: internal
    # what the playbook reads and does not set itself (its play vars that are not internal are defaults of options)
    undocumented = reads - (sets - defaults) - MAGIC - options - from_roles
    assert undocumented == set()
    # nothing documented that the playbook does not use, and every default is an option's
    assert options - reads - play_vars == set()
    assert defaults <= options
    assert TEMPLATE_CONTEXT & options == set()


@pytest.mark.parametrize("name", sorted(PLAYBOOK_FILES))
def test_playbook_spec_defaults_are_the_values_the_playbook_uses(name: str) -> None:
    play = first_play(name)
    sources: dict[str, list[Any]] = {}
    assert "vars_files" not in play  # the defaults are play vars (see docs/design-notes.md)
    for option, value in play.get("vars", {}).items():
        sources.setdefault(option, []).append(value)
    text = "\n".join((PLAYBOOKS / f).read_text() for f in PLAYBOOK_FILES[name])
    specs = [playbook_spec(name), *(role_spec(role) for role in PLAYBOOK_ROLES.get(name, []))]
    options = {option: spec for one in reversed(specs) for option, spec in one.items()}
    for option in options:
        sources.setdefault(option, []).extend(default_filters(text, option))
    for option, spec in playbook_spec(name).items():
        if spec.get("required") or "default" not in spec:
            assert sources.get(option, []) == [], f"{option} has a default in the playbook, not in the spec"
        else:
            assert sources.get(option), f"{option}: the playbook gives it no default"
    for option, values in sources.items():
        if option in options:
            assert values == [options[option].get("default")] * len(values), option


@pytest.mark.parametrize("role", ROLES)
def test_role_spec_defaults_are_the_role_defaults(role: str) -> None:
    defaults = load(ROOT / "roles" / role / "defaults" / "main.yml")
    options = role_spec(role)
    assert set(defaults) <= set(options)
    for option, spec in options.items():
        if spec.get("required"):
            assert option not in defaults, f"{option} is required: no default"
        else:
            assert option in defaults, option
            assert defaults[option] == spec.get("default"), option


@pytest.mark.parametrize("role", ROLES)
def test_role_spec_documents_every_variable_the_role_reads(role: str) -> None:
    base = ROOT / "roles" / role
    files = [load(p) for p in (base / "tasks").glob("*.yml")]
    files += [load(p) for p in (base / "handlers").glob("*.yml")]
    reads = set().union(*(read_variables(data) for data in files))
    reads |= set().union(*(names_in(p.read_text()) for p in (base / "templates").glob("*.j2")))
    reads |= read_variables(load(base / "defaults" / "main.yml"))
    internal = set().union(*(set_variables(data) for data in files))
    if (base / "vars" / "main.yml").exists():
        reads |= read_variables(load(base / "vars" / "main.yml"))
        internal |= set(load(base / "vars" / "main.yml"))
    options = set(role_spec(role))
    prefix = f"{role}_"
    assert {v for v in reads if v.startswith(prefix)} - internal - options == set()
    assert options - reads == set()


# -- through ansible-playbook ---------------------------------------------------------------------------------


def has_collection(name: str) -> bool:
    return any((Path(p) / "ansible_collections" / name.replace(".", "/")).is_dir() for p in sys.path if p)


# the node_agent role uses these; the oldest ansible-core's test environment (make compat) does not have them
NEEDS_ROLE_COLLECTIONS = pytest.mark.skipif(
    not (has_collection("community.crypto") and has_collection("kubernetes.core")),
    reason="the node_agent role needs community.crypto and kubernetes.core",
)


def run_playbook(
    tmp_path: Path, name: str, variables: dict[str, Any], *options: str
) -> tuple[int, list[dict[str, Any]], str]:
    """``ansible-playbook nodeops.maintenance.<name> -e <variables>`` with a kubeconfig that does not exist:
    (rc, the task results, the output)."""
    env = clean_env({"K8S_AUTH_KUBECONFIG": str(tmp_path / "no-such-kubeconfig")})
    cmd = [str(BIN / "ansible-playbook"), f"nodeops.maintenance.{name}", "-e", json.dumps(variables), *options]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, check=False, cwd=tmp_path)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, results, proc.stdout + proc.stderr


def is_check_task(task: str) -> bool:
    """The first tasks of the playbooks and roles, which check the variables and change nothing."""
    return task.startswith(("Check ", "Validating arguments against arg spec"))


ROLLING = {"rolling_node_selector": "pool=gpu", "rolling_maintenance_tasks": "maintenance/ssh_reboot.yml"}
LOCAL_HOST = ["-i", "node-1,", "-e", "ansible_connection=local", "-e", "node_agent_hosts=all"]
AGENT = {"node_agent_become": False, "node_agent_manage_service": False}


@pytest.mark.parametrize(
    ("name", "variables", "options", "task", "messages"),
    [
        (
            "rolling_maintenance",
            {
                **ROLLING,
                "rolling_engine": "foo",
                "rolling_interrupted": "later",
                "rolling_gather_seconds": "soon",
                "rolling_drain_spec": {"forse": True},
            },
            ["--check"],
            "Check the variables against rolling_maintenance.meta.yml",
            [
                "value of rolling_engine must be one of: builtin, operator, got: foo",
                "value of rolling_interrupted must be one of: release, rerun, fail, got: later",
                "argument 'rolling_gather_seconds' is of type",
                "rolling_drain_spec.forse",
            ],
        ),
        (
            "rolling_maintenance",
            {**ROLLING, "rolling_node_names": "node-1,node-2", "rolling_node_selector": ["pool=gpu"]},
            [],
            "Check that the variables have the shape their type says",
            [
                "rolling_node_selector must be text, not a list or a mapping; "
                "rolling_node_names must be a list, not text"
            ],
        ),
        (
            "rolling_maintenance",
            ROLLING,
            ["-e", "rolling_max_unavailable=[1]", "--check"],
            "Check the limits (rolling_max_parallel_operations, rolling_max_unavailable)",
            ["rolling_max_unavailable: '[1]' is not an integer or a whole percentage"],
        ),
        (
            "rolling_maintenance",
            {**ROLLING, "rolling_target_group": "gpu_workers"},
            [],
            "Check what the argument spec cannot say",
            ["got rolling_target_group 'gpu_workers', which is not an inventory group"],
        ),
        (
            "remediate",
            {},
            ["--check"],
            "Check the variables against remediate.meta.yml",
            ["missing required arguments: remediate_nhc_name"],
        ),
        (
            "remediate",
            {"remediate_nhc_name": "workers", "remediate_count": 0},
            [],
            "Check what the argument spec cannot say",
            ["remediate_count must be 1 or more"],
        ),
        (
            "reconcile",
            {"reconcile_until_settled": "maybe", "reconcile_settle_timeout": "long"},
            ["--check"],
            "Check the variables against reconcile.meta.yml",
            ["reconcile_until_settled", "reconcile_settle_timeout"],
        ),
        (
            "install",
            {"context": ["prod"]},
            [],
            "Check that the variables have the shape their type says",
            ["context must be text, not a list or a mapping"],
        ),
        (
            "install",
            {"crds_create_namespace": "perhaps"},
            ["--check"],
            "Check the variables against install.meta.yml",
            ["crds_create_namespace"],
        ),
        pytest.param(
            "deploy_agent",
            {**AGENT, "node_agent_health_retries": "many"},
            [*LOCAL_HOST, "--check"],
            "Check the variables against deploy_agent.meta.yml",
            ["node_agent_health_retries"],
            marks=NEEDS_ROLE_COLLECTIONS,
        ),
        pytest.param(
            "deploy_agent",
            AGENT,
            LOCAL_HOST,
            "Validating arguments against arg spec 'main'",
            ["missing required arguments: node_agent_api_ca_file, node_agent_api_server"],
            marks=NEEDS_ROLE_COLLECTIONS,
        ),
    ],
)
def test_a_wrong_variable_fails_a_first_task_naming_it(
    tmp_path: Path, name: str, variables: dict[str, Any], options: list[str], task: str, messages: list[str]
) -> None:
    rc, results, output = run_playbook(tmp_path, name, variables, *options)
    assert rc == 2, output
    assert results and all(is_check_task(r["task"]) for r in results), output
    *passed, failed = results
    assert all(r["result"]["_status"] == "ok" for r in passed), output
    assert failed["result"]["_status"] == "failed" and failed["task"].startswith(task), output
    for message in messages:
        assert message in failed["result"]["msg"], output
    assert "no-such-kubeconfig" not in output


@pytest.mark.parametrize(
    ("name", "variables", "options"),
    [
        # the defaults pass their own spec
        ("rolling_maintenance", ROLLING, ["--check"]),
        (
            "rolling_maintenance",
            {
                **ROLLING,
                "rolling_node_names": ["node-1"],
                "rolling_max_parallel_operations": "2",
                "rolling_max_unavailable": "10%",
                "rolling_engine": "operator",
                "rolling_cordon": "no",
                "rolling_drain_spec": {"force": True, "pod_eviction_filters": [{"by_resource_name_regex": "gpu"}]},
                "rolling_wait_for_pod_completion": {"pod_selector": "app=training", "timeout_seconds": 600},
                "rolling_max_fail_percentage": "12.5",
                "rolling_interrupted": "rerun",
            },
            [],
        ),
        ("remediate", {"remediate_nhc_name": "workers", "remediate_count": "3"}, ["--check"]),
        ("reconcile", {}, ["--check"]),
        ("install", {"crds_max_unavailable": "25%", "context": "prod"}, ["--check"]),
    ],
)
def test_right_variables_pass_the_checks(
    tmp_path: Path, name: str, variables: dict[str, Any], options: list[str]
) -> None:
    """They reach the first task that talks to the cluster, which fails for want of a kubeconfig."""
    rc, results, output = run_playbook(tmp_path, name, variables, *options)
    assert rc == 2, output
    checks = [r for r in results if is_check_task(r["task"])]
    assert {r["task"] for r in checks} >= {
        f"Check the variables against {name}.meta.yml",
        "Check that the variables have the shape their type says",
        "Check the variable names",
    }
    assert all(r["result"]["_status"] == "ok" for r in checks), output
    [names] = [r["result"] for r in checks if r["task"] == "Check the variable names"]
    assert names["unknown"] == {} and "warnings" not in names, output
    [failed] = [r for r in results if r["result"]["_status"] == "failed"]
    assert "no-such-kubeconfig does not exist" in failed["result"]["msg"], output


@NEEDS_ROLE_COLLECTIONS
def test_deploy_agent_check_mode_on_a_new_controller_and_a_new_node(tmp_path: Path) -> None:
    """No peer CA on the controller, nothing on the node: check mode runs through, without waiting for the health
    of an agent it did not start, and creates nothing (the credential comes from a token here: no cluster)."""
    hosts = {
        name: {
            "ansible_connection": "local",
            "node_agent_install_dir": str(tmp_path / name / "opt"),
            "node_agent_config_dir": str(tmp_path / name / "etc"),
            "node_agent_status_file": str(tmp_path / name / "run" / "status.json"),
            "node_agent_settings": {"hostPort": port},
        }
        for name, port in (("node-1", 30401),)
    }
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (tmp_path / "api-ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    variables = {
        **AGENT,
        "node_agent_hosts": "all",
        "node_agent_api_server": "https://192.0.2.1:6443",
        "node_agent_api_ca_file": str(tmp_path / "api-ca.crt"),
        "node_agent_manage_credential": False,
        "node_agent_api_token": "token",
        "node_agent_pki_dir": str(tmp_path / "pki"),
    }
    rc, results, output = run_playbook(tmp_path, "deploy_agent", variables, "-i", str(inventory), "--check")
    assert rc == 0, output
    assert "does not exist yet" in output
    assert {r["host"] for r in results} == set(hosts)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["api-ca.crt", "inventory.yml"]


@pytest.mark.parametrize(
    ("name", "variables", "warnings"),
    [
        (
            "rolling_maintenance",
            {**ROLLING, "rolling_maxParallelOperations": 3, "rolling_max_unavail": "10%", "rolling_zzz": 1},
            [
                "rolling_maxParallelOperations is not a variable of this playbook; did you mean "
                "rolling_max_parallel_operations?",
                "rolling_max_unavail is not a variable of this playbook; did you mean rolling_max_unavailable?",
                "rolling_zzz is not a variable of this playbook.",
            ],
        ),
        (
            "remediate",
            {"remediate_nhc_name": "workers", "remediate_Count": 3},
            ["remediate_Count is not a variable of this playbook; did you mean remediate_count?"],
        ),
        # a variable of the role the playbook runs is known; a misspelt one is not
        (
            "install",
            {"crds_max_unavailable": "25%", "crds_max_parallel_operation": 2},
            [
                "crds_max_parallel_operation is not a variable of this playbook; did you mean "
                "crds_max_parallel_operations?"
            ],
        ),
    ],
)
def test_a_misspelt_variable_is_named_with_the_closest_one(
    tmp_path: Path, name: str, variables: dict[str, Any], warnings: list[str]
) -> None:
    """A warning, not a failure (the run goes on to the cluster); every other variable passes unnamed."""
    results, output = run_playbook(tmp_path, name, variables, "--check")[1:]
    [names] = [r["result"] for r in results if r["task"] == "Check the variable names"]
    assert names["_status"] == "ok", output
    assert sorted(names["unknown"].values()) == warnings, output
    assert sorted(names["warnings"]) == warnings, output  # Ansible shows each as a [WARNING]
    assert "no-such-kubeconfig does not exist" in output


def test_a_misspelt_required_variable_is_named_before_it_is_reported_missing(tmp_path: Path) -> None:
    rc, results, output = run_playbook(tmp_path, "remediate", {"remediate_nhc_nme": "workers"}, "--check")
    assert rc != 0
    [names] = [r["result"] for r in results if r["task"] == "Check the variable names"]
    assert names["warnings"] == [
        "remediate_nhc_nme is not a variable of this playbook; did you mean remediate_nhc_name?"
    ]
    assert "missing required arguments: remediate_nhc_name" in output


def node_play_tasks(variables: dict[str, Any]) -> list[str]:
    """The tasks of the rolling playbook's node play, as ``ansible-playbook --list-tasks`` reads them."""
    env = clean_env({"ANSIBLE_STDOUT_CALLBACK": "default"})
    cmd = [str(BIN / "ansible-playbook"), "nodeops.maintenance.rolling_maintenance", "--list-tasks"]
    proc = subprocess.run(
        [*cmd, "-e", json.dumps(variables)], capture_output=True, text=True, env=env, timeout=300, check=True
    )
    play = proc.stdout.split("Maintain each node")[1].split("play #")[0]
    return [line.split("\t")[0].strip() for line in play.splitlines()[1:] if "\tTAGS:" in line]


def test_each_node_runs_only_the_steps_that_are_configured() -> None:
    """Ansible forks a worker for each task of each host, a skipped one too: a step that is not configured (gate,
    notifications, figures pushed) is no task of the node play, and the maintenance is its own tasks."""
    bare = {**ROLLING, "rolling_maintenance_tasks": "maintenance/simulated_reboot.yml"}
    maintenance = [
        "Read the boot ID of {{ nodeops_node_name }}",
        "Reboot {{ nodeops_node_name }} (simulated)",
        "Wait until {{ nodeops_node_name }} is back from its reboot",
    ]
    admit = "Wait until the scheduler has made the node ready (cordoned and drained)"
    release = "Release the node once it is Ready"
    assert node_play_tasks(bare) == [admit, *maintenance, release]

    notify = "Notify {{ nodeops_event.event }}"
    everything = {
        **bare,
        "rolling_gate_tasks": "gate.yml",
        "rolling_notify_url": "https://hooks.example.com/x",
        "rolling_metrics_textfile": "/var/lib/node_exporter/rolling.prom",
    }
    assert node_play_tasks(everything) == [
        "Note when the gate gives up",
        "Check the gate",
        admit,
        notify,
        *maintenance,
        release,
        notify,
        "Push the run's figures",
    ]


def test_no_step_of_a_node_is_a_dynamic_include() -> None:
    """--list-tasks does not show a block's rescue: the node play and the files it imports hold no include_tasks
    (a skipped one still costs each host a worker), only the gate's own retry loop does, and it runs only with
    gate tasks."""

    def actions(tasks: list[dict[str, Any]]) -> Iterator[str]:
        for task in tasks or []:
            for section in ("block", "rescue", "always"):
                yield from actions(task.get(section))
            yield from (key for key in task if key.startswith("ansible.builtin.include"))

    node_play = load(PLAYBOOKS / "rolling_maintenance.yml")[1]
    assert node_play["name"].startswith("Maintain each node")
    files = ["rolling_maintain.yml", "rolling_notify.yml", "rolling_push.yml", "rolling_nothing.yml"]
    found = list(actions(node_play["tasks"]))
    for name in files:
        found += actions(load(PLAYBOOKS / "tasks" / name))
    assert found == ["ansible.builtin.include_role"]  # the role of rolling_maintenance_role, named at run time
