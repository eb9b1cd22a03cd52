#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: rolling_maintenance
short_description: The steps of a rolling maintenance run, recorded in the cluster
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - The building block of the C(nodeops.maintenance.rolling_maintenance) playbook; use the playbook unless you
    build a flow of your own. The playbook takes O(step=start) with O(defer_requests), O(step=drive), then on
    each node's host O(step=admit), the maintenance and O(step=release), and O(step=summary) at the end.
  - A run is named by O(run_id) and recorded in a ConfigMap C(nodeops-rolling-<run_id>) in O(config_namespace),
    with per node its state (V(pending), V(maintaining), V(done), V(failed), V(interrupted)), its admission batch
    (its wave) and the times of each step. The record is written before anything that depends on it, so a run
    killed at any moment is picked up by the next one with the same O(run_id), and no node is handed to its
    maintenance tasks twice.
  - O(step=start) requests maintenance (one C(NodeMaintenance) per node, as M(nodeops.maintenance.node_maintenance)
    does) for every target not finished in this run, and deals with the nodes a killed run left in their
    maintenance (O(interrupted)).
  - O(step=admit) and O(step=release) take one node (O(node)) at a time; each node's host drives its own
    maintenance while the others drive theirs. O(step=admit) checks the window and the gates for the node, makes
    its request when it has none (after O(step=start) with O(defer_requests), the first request of each node is
    made here), runs reconcile passes (O(engine=builtin)) or only watches (O(engine=operator)) until the scheduler
    has made it Ready (cordoned and drained), and records it as V(maintaining) in an admission batch (RV(wave)),
    the nodes admitted within O(gather_seconds) of the batch's first. When and how many nodes are made Ready is
    the scheduler's decision (C(maxParallelOperations), C(maxUnavailable)), not this module's. A pending node whose
    Node object was deleted meanwhile fails (C(its Node object is gone)) and its request is given back.
  - O(step=release) takes that node's outcome (O(failure)). A node that succeeded is released once it is Ready in
    Kubernetes again (its request is deleted and the node uncordoned); a node that failed, or did not come back,
    gets the C(RequestorFailed) condition and stays cordoned for a person (unless O(release_failed)). A drained
    request that other requestors joined (C(additionalRequestors)) stays, with the node in maintenance, until they
    leave it; the run is done with the node and the task warns, naming them.
  - O(step=admit) and O(step=release) each update only their node's row of the record, with a conditional write
    tried again when another host wrote in between. A node is handed to its maintenance once. O(step=admit) for a
    node admitted earlier, by this host or another, returns RV(admitted=false) and changes nothing; a node a killed
    run left V(maintaining) is the next O(step=start)'s (O(interrupted)). O(step=admit) checks the gates before it
    makes the request, again every O(gate_interval) seconds while the node waits for the scheduler, and the window
    before each pass. It admits no node once the run's failures are over O(max_fail_percentage), also when they go
    over while it waits; then, and whenever else it ends without admitting the node (a stop, a timeout, an error),
    it gives the node's request back and leaves the node V(pending).
  - B(A stopped run.) When an O(step=admit) stops the run (the window closed, a gate blocked past
    O(gate_timeout), or no slot came for its node within O(wave_timeout) while the scheduler had not taken it),
    or O(step=stop) is called, the stop is written to the record (RV(stopped); the first one stays). Every other
    O(step=admit) of the run, waiting or still to come, then gives its request back and returns
    RV(admitted=false) with that RV(stopped), within about 5 seconds (within O(gate_interval) while its gates
    block; one may make its request in between, given back at once); the nodes in their maintenance go on and
    are released. O(step=summary) returns it; the next O(step=start) clears it and goes on with the run.
  - O(step=admit), O(step=release), O(step=drive) and O(step=stop) run on the controller, in the module's action,
    whatever the task's host and connection (the host is the node under maintenance; no C(delegate_to) is needed).
    The connection options, a C(kubeconfig) path included, and the task's C(environment) (C(K8S_AUTH_*),
    C(KUBECONFIG)) are the controller's. The other steps run where the task runs, as any module.
  - O(step=drive) starts the run's driver (O(engine=builtin)) and returns at once. The driver is a process on the
    controller, apart from Ansible's, that runs reconcile passes one after the other, holding the reconcile Lease
    from pass to pass, until no node of the run is V(pending) or V(maintaining), or until the C(ansible-playbook)
    process that started it is gone (or the run stopped and no node of it is V(maintaining)). While it runs,
    O(step=admit) and O(step=release) run no pass of their own; each only reads its own node's request and Node (and
    the run's record every few seconds), so that hundreds of hosts waiting at once cost little. When the steps run in
    the module's action, the driver rings a bell on the controller for each node whose request one of its passes
    changed, and a step waiting for its request reads it when its node's bell rings (and at least every 5 s), not
    every O(poll_interval); what it decides, it decides on what it reads. The driver sends the Events of its passes
    from threads of their own, so a node is made ready without waiting for them. The driver is not needed for
    safety or progress; without it
    (not started, or killed and its Lease runs out within its 60 s) the nodes' steps run the passes themselves.
    Another run's driver, or any other reconcile pass holding the Lease, serves this run's requests too. With
    O(engine=operator) it does nothing. Start it after O(step=start).
  - O(step=stop) records that the run stops (O(stop_reason) says why), as above; it changes no request itself.
  - O(step=summary) returns the record as a table.
  - O(step=window) only says whether the maintenance window (O(window)) is open, and when it opens, after checking
    the settings of O(window) and O(gates); it reads nothing in the cluster.
  - B(Maintenance window.) With O(window), a node is admitted only inside it. O(step=start) outside the window
    changes nothing (no record, no request) and returns RV(stopped) with the time the window opens. O(step=admit)
    checks the window before anything that could schedule its node, and before each of its reconcile passes;
    outside the window it stops the run (see B(A stopped run)), gives the node's request back (a node the scheduler
    already cordoned or drained for this run is uncordoned; the node stays V(pending) in the record), and returns
    RV(stopped). The nodes in their maintenance when the window closes are released normally by O(step=release);
    no node is admitted after them. The same command later goes on where the run stopped.
  - B(Gates.) With O(gates), O(step=admit) checks, before its node can be cordoned, for pods that match
    O(gates.pod_selector) (on that node, or anywhere), alerts firing in Prometheus (O(gates.prometheus_url)) whose
    name matches O(gates.alert_filter), and the outcome of the playbook's own gate tasks (O(gates.check_failure)).
    While something blocks, it checks again every O(gate_interval) seconds, up to O(gate_timeout); then it stops
    the run as outside the window, returning RV(stopped) with what blocks. Prometheus out of reach, or answering
    with an error, blocks (fail-safe). Nothing new is cordoned while a gate blocks.
  - With a window or gates and O(engine=builtin), the reconcile passes of O(step=start) and O(step=release) (the
    releases) schedule no new request; only O(step=admit) does, after the checks.
  - With O(engine=operator) the NVIDIA Maintenance Operator cordons and drains requested nodes by itself, whenever
    its limits allow; the run can only decide when it requests nodes and when it hands them to the maintenance.
    Outside the window O(step=start) requests nothing, and a stop (window or gate) takes each waiting node's
    request back at its O(step=admit); until then the operator may prepare further nodes of the run, within its
    C(maxParallelOperations) and C(maxUnavailable). They are uncordoned at the stop, not maintained.
extends_documentation_fragment:
  - nodeops.maintenance.k8s_auth_options
  - nodeops.maintenance.request_options
  - nodeops.maintenance.reconcile_options
  - nodeops.maintenance.attributes
attributes:
  check_mode:
    support: partial
    details:
      - Each step runs as it would, on a copy of what it reads from the cluster that keeps its writes in memory, and
        reports what it would do; nothing is written to the cluster.
      - It waits for nothing and runs no reconcile pass. Where the step would wait (for the scheduler, its gates, a
        node to be Ready in Kubernetes), it stops and returns RV(waiting), saying what it would wait for (no
        RV(resume)). An O(step=admit) whose node's request is Ready already reports the admission it would record
        (RV(wave), RV(state)), with RV(admitted) false, since no maintenance runs in check mode.
      - O(step=drive) starts no driver and reports no change.
  diff_mode:
    support: none
options:
  step:
    description: Which step of the run to take.
    type: str
    choices: [start, summary, window, admit, release, drive, stop]
    required: true
  run_id:
    description:
      - Names the run, e.g. a change ticket. Starting the playbook again with the same run ID picks the run up
        where it stopped; a run whose nodes are all finished does nothing. Use a new run ID for a new run.
    type: str
    required: true
  node_names:
    description:
      - The target nodes by name (O(step=start)). With O(node_selector), the nodes of both.
    type: list
    elements: str
    default: []
  node_selector:
    description: A label selector for more target nodes (O(step=start)).
    type: str
  engine:
    description:
      - V(builtin) runs the reconcile passes itself; V(operator) only watches, for a cluster where the NVIDIA
        Maintenance Operator reconciles the objects.
      - The NVIDIA Maintenance Operator serves O(cordon=false) as V(true) and O(drain_spec.timeout_seconds=0)
        as V(300) (the CRD's defaults, once its API types leave out a false or a 0). With V(operator),
        O(step=start) writes the requests that way from the start and warns; RV(overrides) lists what changed.
    type: str
    choices: [builtin, operator]
    default: builtin
  interrupted:
    description:
      - What O(step=start) does with a node that a killed run left in its maintenance (handed to the tasks, no
        outcome recorded).
      - V(release) records it as V(interrupted) and releases it once it is Ready (the maintenance is not run again).
      - V(rerun) queues it again, for maintenance tasks that are safe to run twice.
      - V(fail) marks it failed (C(RequestorFailed)) and leaves it cordoned for a person.
    type: str
    choices: [release, rerun, fail]
    default: release
  retry_failed:
    description: With O(step=start), queue the nodes that failed earlier in this run again.
    type: bool
    default: false
  defer_requests:
    description:
      - With O(step=start), record the targets but request none of them; each node's O(step=admit) makes its
        request. Then only the nodes whose hosts are ready for their maintenance are in the scheduler's queue.
      - A request of a pending node that is there already (an O(step=admit) stopped in its wait) is given back.
    type: bool
    default: false
  node:
    description: The node of O(step=admit) and O(step=release).
    type: str
  failure:
    description:
      - With O(step=release), why the node's maintenance tasks failed; unset or empty when they passed.
      - The first outcome on record stands. Given after a release that recorded the node's success and then failed
        (it was not released), it is the release that is tried again.
    type: str
  stop_reason:
    description:
      - With O(step=stop), why the run stops, for the record and each node's admit.
    type: str
  timing:
    description:
      - With O(step=release), the start and end (seconds since the epoch) of the node's maintenance tasks, for the
        summary's C(maintained) column. Unset, from the node's admission to the release.
    type: list
    elements: float
  gather_seconds:
    description:
      - With O(step=admit), a node joins the admission batch (RV(wave)) whose first node was admitted at most this
        many seconds earlier, while one of the batch's nodes is still in its maintenance; else it starts a new one.
    type: float
    default: 30
  wave_timeout:
    description:
      - O(step=admit) fails when its node's request did not become Ready in this many seconds, naming what blocks
        it. When no slot came for the node at all, the run stops too (RV(stopped), V(timeout)).
    type: float
    default: 3600
  node_ready_timeout:
    description:
      - How long O(step=release) waits for a maintained node, and O(step=start) for a node interrupted during its
        maintenance, to be Ready in Kubernetes before it fails it.
    type: float
    default: 600
  release_timeout:
    description: How long a step waits for the requests it gives back to be gone (the node uncordoned).
    type: float
    default: 300
  release_failed:
    description: Release failed nodes too (uncordon them) instead of leaving them cordoned for a person.
    type: bool
    default: false
  max_fail_percentage:
    description:
      - No node is admitted once more than this percentage of the run's nodes failed (Ansible's rule for the
        keyword of the same name); RV(abort) says so.
    type: float
    default: 0
  poll_interval:
    description:
      - Seconds between two looks at the cluster when nothing moved.
      - A node's step that waits for its request while the run's driver rings (see O(step=drive)) looks when its
        node's bell rings instead, and at least every 5 s.
    type: float
    default: 0.5
  workers:
    description: Requests moved in parallel within a reconcile pass (O(engine=builtin)).
    type: int
    default: 16
  window:
    description:
      - The maintenance window; without it (or with none of its options set) a node may be admitted at any time.
      - Each day in O(window.days) opens the window at O(window.start) for until O(window.end), wall-clock times in
        O(window.time_zone). An end not after the start runs over midnight into the next day (V(22:00) to V(04:00));
        the same start and end make a whole day.
      - On the night a daylight-saving change skips a start or end time, it is read as that much time after the
        change (V(02:30) as V(03:30)); a time the change repeats is its first occurrence.
    type: dict
    suboptions:
      days:
        description:
          - The days on which the window opens, V(mon) to V(sun) (or the full names, any case). None means every day.
        type: list
        elements: str
        default: []
      start:
        description: When the window opens, V(HH:MM) from V(00:00) to V(23:59). Without O(window.start) and
          O(window.end), the whole day.
        type: str
      end:
        description: When the window closes (the end itself is outside), V(HH:MM).
        type: str
      time_zone:
        description: The IANA time zone of the times and days, e.g. V(Europe/Berlin).
        type: str
        default: UTC
  gates:
    description:
      - Checks before each node's admission (O(step=admit)); each one given must let the node through. See
        O(gate_timeout).
    type: dict
    suboptions:
      pod_selector:
        description:
          - A label selector for pods (in every namespace) that block a node's admission while they run (any phase
            but C(Succeeded) and C(Failed)).
        type: str
      pod_scope:
        description:
          - V(wave) counts only pods on the node to be admitted; V(cluster) counts pods anywhere.
        type: str
        choices: [wave, cluster]
        default: wave
      prometheus_url:
        description:
          - The base URL of Prometheus (C(http://prometheus.monitoring:9090)); its firing alerts whose name matches
            O(gates.alert_filter) block. Prometheus out of reach blocks too.
        type: str
      alert_filter:
        description: A regular expression the whole alert name must match for the alert to block.
        type: str
        default: .*
      pending_alerts:
        description: Whether pending alerts (not firing yet) block too.
        type: bool
        default: false
      validate_certs:
        description: Whether to check the certificate of an https Prometheus URL.
        type: bool
        default: true
      check_failure:
        description:
          - The message of the playbook's own gate tasks when they failed (the playbook runs them, and retries them
            up to its gate timeout, before this step). When set, O(step=admit) stops the run at once.
        type: str
      tasks:
        description:
          - Whether the playbook runs gate tasks of its own before each node's admission. Then, as with the other
            gates, the releases of O(step=start) and O(step=release) schedule no new request, so that nothing new is
            cordoned before those tasks have passed.
        type: bool
        default: false
  gate_timeout:
    description:
      - How long O(step=admit) checks a blocked gate again before the run stops (RV(stopped)), in seconds.
    type: float
    default: 3600
  gate_interval:
    description: Seconds between two checks of a blocked gate.
    type: float
    default: 30
  progress_after:
    description:
      - While O(step=admit) waits (a gate that blocks, its node's request not Ready yet), O(step=release) waits (the
        maintained node not Ready in Kubernetes yet) or O(step=start) waits (nodes interrupted during their
        maintenance not Ready yet), print what it waits for at least every this many seconds. The task still waits
        to the end, and the step's timeout (O(gate_timeout), O(wave_timeout), O(node_ready_timeout)) counts from
        the start of the wait.
      - The module hands the wait back to the task's action every this many seconds, which prints the line and runs
        it again with O(resume). V(0) waits in one call, without a line.
    type: float
    default: 0
  resume:
    description:
      - Set by the task's action itself to go on with a wait that the module handed back (see O(progress_after)),
        naming when that wait began and of what kind. There is no need to set it in a task.
      - O(step=release) with O(resume) takes the node's outcome from the record, not from O(failure).
      - O(step=start) with O(resume) only waits for and releases the interrupted nodes; the call that handed the wait
        back did the rest of the start.
    type: dict
    suboptions:
      phase:
        description:
          - The wait, V(interrupted) (O(step=start)), V(admit_gate) or V(admit) (O(step=admit)), or V(back)
            (O(step=release)).
        type: str
        choices: [interrupted, admit_gate, admit, back]
        required: true
      since:
        description: When the wait began, in seconds since the epoch.
        type: float
        required: true
      nodes:
        description: The nodes the wait is for (with V(interrupted), whatever the targets are by then).
        type: list
        elements: str
notes:
  - The run's record is a ConfigMap; the identity running the playbook needs to get, create and update ConfigMaps
    in O(config_namespace), besides what M(nodeops.maintenance.node_maintenance) needs.
seealso:
  - module: nodeops.maintenance.node_maintenance
  - module: nodeops.maintenance.maintenance_reconcile
"""

EXAMPLES = r"""
- name: Record the targets; each node's admit makes its request
  nodeops.maintenance.rolling_maintenance:
    step: start
    run_id: CHG-1234
    requestor: upgrades.example.com
    node_selector: nvidia.com/gpu.present=true
    drain_spec: {force: true, delete_emptydir_data: true}
    defer_requests: true

- name: Start the run's driver on the controller
  nodeops.maintenance.rolling_maintenance:
    step: drive
    run_id: CHG-1234
    requestor: upgrades.example.com

# On each node's host, one node at a time
- name: Wait for the node's turn, Saturday and Sunday nights only, and not while storage alerts fire
  nodeops.maintenance.rolling_maintenance:
    step: admit
    node: "{{ inventory_hostname }}"
    run_id: CHG-1234
    requestor: upgrades.example.com
    window: {days: [sat, sun], start: "22:00", end: "05:00", time_zone: Europe/Berlin}
    gates:
      prometheus_url: http://prometheus.monitoring:9090
      alert_filter: "Ceph.*|Disk.*"
      pod_selector: maintenance.example.com/do-not-disturb=true
    gate_timeout: 1800
  register: admit

- name: Say why the node was not admitted
  ansible.builtin.debug:
    msg: "{{ admit.stopped.message }}"
  when: admit.stopped is defined

- name: Report how the node's maintenance went, and release it once it is Ready
  nodeops.maintenance.rolling_maintenance:
    step: release
    node: "{{ inventory_hostname }}"
    run_id: CHG-1234
    requestor: upgrades.example.com
    failure: "{{ maintenance_failure | default(omit) }}"
  when: admit.admitted

- name: Summarize the run
  nodeops.maintenance.rolling_maintenance:
    step: summary
    run_id: CHG-1234
    requestor: upgrades.example.com
  register: summary
"""

RETURN = r"""
overrides:
  description:
    - One sentence per option that the engine serves differently from what was asked (O(engine=operator)
      only); the same sentences are the task's warnings.
  returned: O(step=start)
  type: list
  elements: str
  sample: []
run_id:
  description: The run.
  returned: always
  type: str
record:
  description: C(namespace/name) of the ConfigMap that records the run.
  returned: always
  type: str
  sample: nodeops-maintenance/nodeops-rolling-chg-1234
waves:
  description: How many admission batches (waves) the run has had.
  returned: always
  type: int
counts:
  description: How many nodes are in each state.
  returned: always
  type: dict
  sample: {pending: 12, maintaining: 4, done: 8, failed: 0, interrupted: 0}
need_a_look:
  description: The nodes that failed or were interrupted.
  returned: always
  type: list
  elements: str
failed_nodes:
  description: The nodes that failed (left cordoned with C(RequestorFailed) unless O(release_failed)).
  returned: always
  type: list
  elements: str
interrupted_nodes:
  description: The nodes a killed run left in their maintenance, released without running it again.
  returned: always
  type: list
  elements: str
failed_percentage:
  description: The percentage of the run's nodes that failed.
  returned: always
  type: float
complete:
  description: Whether no node is pending or in its maintenance.
  returned: always
  type: bool
requested:
  description:
    - With O(step=start), per target not finished, the request (as M(nodeops.maintenance.node_maintenance)).
    - With O(defer_requests), only the requests of pending nodes it gave back (left by an O(step=admit) that was
      stopped in its wait), as V(deleted) or V(left).
  returned: success and O(step=start)
  type: list
  elements: dict
added:
  description: With O(step=start), the targets new to the run's record.
  returned: success and O(step=start)
  type: list
  elements: str
requeued:
  description:
    - With O(step=start), the nodes queued again (pending), interrupted during their maintenance with
      O(interrupted=rerun) or failed with O(retry_failed).
  returned: success and O(step=start)
  type: list
  elements: str
waiting:
  description:
    - When a step handed its wait back (see O(progress_after)), what it waits for. The task's action prints it and
      runs the step again with RV(resume), so a task's result has it only when the module ran without its action,
      or in check mode (what the step would wait for).
  returned: when a wait was handed back
  type: dict
  contains:
    phase:
      description: The wait, as O(resume.phase).
      type: str
    since:
      description: When the wait began (seconds since the epoch).
      type: float
    waited:
      description: Seconds waited so far.
      type: float
    timeout:
      description: The most the wait lasts (O(gate_timeout), O(wave_timeout) or O(node_ready_timeout)).
      type: float
    message:
      description: What the step waits for, for a person.
      type: str
    nodes_not_ready:
      description: With V(interrupted) and V(back), the nodes not Ready in Kubernetes yet.
      type: list
      elements: str
    blockers:
      description: With V(admit_gate), what blocks (as RV(stopped.blockers)).
      type: list
      elements: dict
  sample:
    phase: admit
    since: 1796054400.0
    waited: 30.2
    timeout: 3600
    message: "Run chg-1: gpu-07 waiting for the scheduler (waiting 30s of at most 3600s)"
resume:
  description: When a step handed its wait back, what to give as O(resume) to the same step to go on with it.
  returned: when a wait was handed back
  type: dict
  sample: {phase: admit, since: 1796054400.0, nodes: [gpu-07]}
pending:
  description: With O(step=start), the nodes waiting for their admission.
  returned: success and O(step=start)
  type: list
  elements: str
interrupted:
  description: With O(step=start), the nodes a killed run left in their maintenance.
  returned: success and O(step=start)
  type: list
  elements: str
wave:
  description:
    - With O(step=admit), the admission batch the node joined; null when it was not admitted.
    - With O(step=release), the node's admission batch.
  returned: success and O(step) is V(admit) or V(release)
  type: int
opened:
  description:
    - With O(step=admit), whether this admission started a new admission batch (RV(wave)); the nodes admitted
      within O(gather_seconds) of it, while one of the batch's nodes is still in its maintenance, join it.
  returned: success and O(step=admit)
  type: bool
batch_ended:
  description:
    - With O(step=release), the admission batch this call ended (the last of its nodes to leave its maintenance,
      done or failed; exactly one call ends a batch, whichever host makes it), with its C(wave), C(nodes) and
      C(failures) (node to message); null otherwise. A batch that ended takes no further node.
  returned: success and O(step=release)
  type: dict
  sample: {wave: 3, nodes: [gpu-7, gpu-9], failures: {gpu-9: "Reboot: timed out"}}
nodes:
  description: With O(step=summary), one entry per node.
  returned: success and O(step=summary)
  type: list
  elements: dict
  sample:
    - {node: gpu-07, wave: 2, outcome: done, waited: 41.2, drained: 12.5, maintained: 95.0, back: 3.1, message: ""}
done:
  description: With O(step=admit), whether no node of the run is left pending.
  returned: success and O(step=admit)
  type: bool
abort:
  description: Whether more than O(max_fail_percentage) of the nodes failed, so no node is admitted any more.
  returned: success and O(step) is V(admit) or V(release)
  type: bool
released:
  description: The nodes whose requests were released in this step.
  returned: success and O(step) is V(start) or V(release)
  type: list
  elements: str
finished:
  description: With O(step=start), the targets finished earlier in this run (done, failed or interrupted), left alone.
  returned: success and O(step=start)
  type: list
  elements: str
stopped:
  description:
    - Why the run stopped before its last node (the window is closed, or a gate blocks; see B(A stopped run)
      above). Run the same command again to go on.
  returned: when O(step=start) stopped the run; O(step=admit) that did not admit its node because of a stop;
    O(step=stop); O(step=summary) (null while the run was not stopped)
  type: dict
  contains:
    reason:
      description:
        - V(window), V(gate), V(timeout) (no slot came for a node within O(wave_timeout)) or V(asked)
          (O(step=stop)).
      type: str
    message:
      description: What stopped the run and what to do.
      type: str
    opens_at:
      description: With V(window), when the window opens next (in its time zone).
      type: str
    blockers:
      description:
        - With V(gate), what blocks, each with C(gate) (V(pods), V(alerts), V(tasks)) and C(message); pods with
          C(namespace), C(name), C(node) and C(phase), alerts with C(alertname), C(state) and C(labels).
      type: list
      elements: dict
    at:
      description: When the stop was recorded (RFC 3339); only a stop on record has it.
      type: str
  sample:
    reason: gate
    message: "The next admission is blocked (still after 1800s): pod ml/trainer-0 on gpu-07. ..."
    blockers: [{gate: pods, message: pod ml/trainer-0 on gpu-07, namespace: ml, name: trainer-0, node: gpu-07}]
withdrawn:
  description: When O(step=admit) stopped, its node if it gave the node's request back (the node stays pending).
  returned: when O(step=admit) did not admit its node because of a stop
  type: list
  elements: str
window:
  description: With O(window), whether it is open now, when it opens next and when it closes.
  returned: with O(window), when O(step=window), or when the window stopped the run
  type: dict
  sample: {open: false, window: "sat,sun 22:00-05:00 Europe/Berlin", opens_at: "2026-12-05T22:00+01:00 (Europe/Berlin)",
           opens_in: 52200.0, closes_at: null}
open:
  description: With O(step=window), whether a node may be admitted now (always true without a window).
  returned: O(step=window)
  type: bool
gates:
  description:
    - With O(step=admit) and O(gates), what the gates did before the node's admission (how many checks, how long
      they waited, and what blocked meanwhile).
  returned: when O(step=admit) admitted its node
  type: dict
  sample: {checks: 3, waited: 60.2, blocked_by: ["alert CephHealthWarning (firing): severity=warning"]}
lines:
  description: With O(step=summary), the summary as a table, one string a line.
  returned: success and O(step=summary)
  type: list
  elements: str
node:
  description: The node of O(step=admit) or O(step=release).
  returned: success and O(step) is V(admit) or V(release)
  type: str
admitted:
  description:
    - With O(step=admit), whether this call handed the node to its maintenance tasks (V(maintaining)). False when
      it was admitted earlier, by this host or another, or is finished (RV(state)), when the failures are over
      O(max_fail_percentage) (RV(abort)), or when the window or a gate stopped it (RV(stopped)); run no
      maintenance then.
  returned: success and O(step=admit)
  type: bool
driver:
  description:
    - With O(step=drive), the process ID of the driver it started on the controller; null in check mode.
  returned: success and O(step=drive), run in the module's action
  type: int
passes:
  description:
    - With O(step=drive) run as a module (not in its action), how many reconcile passes the driver ran before the
      run ended; 0 in check mode.
  returned: O(step=drive)
  type: int
errors:
  description: With O(step=drive) run as a module, the last errors its passes met (tried again each time).
  returned: O(step=drive)
  type: list
  elements: str
state:
  description: The node's state in the record after the step.
  returned: success and O(step) is V(admit) or V(release)
  type: str
failure:
  description: Why the node failed, as the record has it; null when it did not.
  returned: success and O(step=release), or O(step=admit) when its Node object is gone
  type: str
"""

from typing import Any

from ansible_collections.nodeops.maintenance.plugins.module_utils.k8s.module import K8sModule
from ansible_collections.nodeops.maintenance.plugins.module_utils.rolling_steps import ARGUMENT_SPEC, run

CHECKS: dict[str, Any] = {}


def main() -> None:
    run(K8sModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True, **CHECKS))


if __name__ == "__main__":
    main()
