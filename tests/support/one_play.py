"""The one-play shape of a rolling run, for the tests and the benchmarks until the rolling playbook takes it: a
play on the controller records the targets (``start`` with ``defer_requests``), starts the run's driver and adds a
host per node, then one ``host_pinned`` play in which each host admits its node, runs the maintenance tasks and
releases it (as failed when they fail). The steps of each node run on the controller, whatever the host."""

from __future__ import annotations

from typing import Any

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}


def plays(
    steps: dict[str, Any],
    start: dict[str, Any],
    maintenance: str,
    limits: dict[str, Any] | None = None,
    host_vars: dict[str, Any] | None = None,
    play_vars: dict[str, Any] | None = None,
    drive: bool = True,
) -> list[dict[str, Any]]:
    """The plays: ``steps`` are the settings of every rolling_maintenance step (module_defaults), ``start`` the
    targets of the start step (node_names or node_selector), ``maintenance`` the tasks file each host includes,
    ``limits`` the MaintenanceOperatorConfig spec to write first (in ``steps['config_namespace']``),
    ``host_vars`` the variables of each added host (by default a local connection), ``play_vars`` the main
    play's variables, ``drive`` whether the run's driver runs the reconcile passes (else each host's steps do)."""
    first: list[dict[str, Any]] = []
    if limits:
        first.append(
            {
                "name": "Write the limits",
                "nodeops.maintenance.apply": {
                    "definition": {
                        "apiVersion": "maintenance.nvidia.com/v1alpha1",
                        "kind": "MaintenanceOperatorConfig",
                        "metadata": {"name": "default", "namespace": steps["config_namespace"]},
                        "spec": limits,
                    },
                    "force_conflicts": True,
                },
            }
        )
    first += [
        {
            "name": "Record the targets",
            "nodeops.maintenance.rolling_maintenance": {"step": "start", "defer_requests": True, **start},
            "register": "started",
        },
        {
            "name": "Start the run's driver",
            "nodeops.maintenance.rolling_maintenance": {"step": "drive"},
            "when": drive,
        },
        {
            "name": "A host per node",
            "ansible.builtin.add_host": {
                "name": "{{ item }}",
                "groups": ["run_nodes"],
                "nodeops_node_name": "{{ item }}",
                **(
                    host_vars
                    or {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
                ),
            },
            "loop": "{{ started.pending }}",
            "loop_control": {"label": "{{ item }}"},
            "changed_when": False,
        },
    ]
    return [
        {
            "name": "Record the run",
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "module_defaults": {"nodeops.maintenance.rolling_maintenance": steps},
            "tasks": first,
        },
        {
            "name": "Each host drives its node",
            "hosts": "run_nodes",
            "strategy": "ansible.builtin.host_pinned",
            "gather_facts": False,
            "module_defaults": {"nodeops.maintenance.rolling_maintenance": steps},
            "vars": play_vars or {},
            "tasks": [
                {
                    "name": "Wait for the scheduler",
                    "nodeops.maintenance.rolling_maintenance": {"step": "admit", "node": "{{ nodeops_node_name }}"},
                    "register": "admitted",
                },
                {
                    "name": "The maintenance",
                    "when": "admitted.admitted",
                    "block": [
                        {"name": "Note the start", "ansible.builtin.set_fact": {"began": "{{ now().timestamp() }}"}},
                        {"name": "Run it", "ansible.builtin.include_tasks": maintenance},
                        {
                            "name": "Release",
                            "nodeops.maintenance.rolling_maintenance": {
                                "step": "release",
                                "node": "{{ nodeops_node_name }}",
                                "timing": ["{{ began }}", "{{ now().timestamp() }}"],
                            },
                        },
                    ],
                    "rescue": [
                        {
                            "name": "Release as failed",
                            "nodeops.maintenance.rolling_maintenance": {
                                "step": "release",
                                "node": "{{ nodeops_node_name }}",
                                "failure": "{{ ansible_failed_result.msg | default('failed') }}",
                            },
                        }
                    ],
                },
            ],
        },
    ]
