"""Ansible's own cost of the shapes of a rolling run, without a cluster: waves of plays against one play.

    .venv/bin/python benchmarks/play_shapes.py [--nodes 200] [--slots 20] [--maintenance 2] [--shapes ...]

Not part of ``make test``; needs no cluster. A rolling run admits at most ``--slots`` nodes at a time (the
scheduler's maxParallelOperations) and runs a ``--maintenance``-second task on each. The scheduler is stood in
for by slot files in a temporary directory (taking one is an ``O_EXCL`` create, giving it back a delete), so what
is measured is Ansible's handling of the hosts and the steps, the part that does not depend on the cluster. Each
shape runs ``ansible-playbook`` on the same inventory of ``--nodes`` local hosts, one after the other in one run:

* ``waves``: the shape ``playbooks/rolling_maintenance.yml`` had until 2026-12-06 (it is ``pinned-action`` now):
  a driver host carries the run from play to play; each wave is a copy of a play (``linear``) whose hosts are the
  driver and the wave's nodes; a step on the driver takes the next wave's slots, the wave's hosts run the
  maintenance, a step on the driver gives the slots back. The playbook holds 1000 copies, as the collection's did,
  and the copies a run does not need match no host.
* ``pinned-action``: one play, ``strategy: host_pinned``: each host takes a slot (waiting for one), runs the
  maintenance and gives its slot back. The steps are controller-side actions (they run in Ansible's worker
  process). ``host_pinned`` keeps the hosts it started going before it starts another, so a host that holds a slot
  gets the next free worker before a host that has not started: with more forks than slots, no run here stood
  still (the default, ``2 * slots + 1``, also keeps as many hosts waiting as there are slots, so that a slot
  given back is taken at once).
* ``pinned-module``: the same, with the steps as modules (a Python process each, as a module of the collection
  run on the controller with ``delegate_to: localhost`` is).
* ``pinned-serial``: ``pinned-action`` with ``serial: --batch`` (default four times ``--slots``; not run by
  default): Ansible runs the play over the hosts a batch at a time, so it walks and computes the variables of a
  batch's hosts only, and the slots stand idle at each batch's end while its last hosts finish.
* ``free-action``: the same play with ``strategy: free`` (not run by default). It stands still as soon as there
  are more hosts than forks: ``free`` hands a freed worker to the next host in turn, a host that has not started
  yet, which then waits for a slot; once every worker holds a waiting host, the hosts that hold the slots never
  get one again to give them back. (``throttle`` on the waiting task does not help: ``free`` stops looking at the
  other hosts when it reaches a throttled one.)

For each it prints the wall time against the ideal (``ceil(nodes / slots) * maintenance``: slots never idle, no
overhead), the CPU seconds of ``ansible-playbook`` and everything it started, per 1,000 nodes, and the idle time of
a slot: from a node giving it back to the next node taking it (median and max over the run). The ratios are
against the ``waves`` shape of the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
COPIES = 1000  # wave plays in the waves shape, as the rolling playbook held them before it took one play

# The stand-in for the scheduler: take a free slot (waiting for one) or give one back, logging when. The same code
# serves as an action plugin and as a module.
SLOT_CODE = """
import json, os, time

def slot(op, directory, slots, node, interval=0.1):
    log = os.path.join(directory, "log")
    if op == "take":
        while True:
            # a cheap look first, as a waiting host that polls its own request would (hundreds of hosts wait)
            if len(os.listdir(directory)) - 1 >= slots:  # the slots taken, and the log
                time.sleep(interval)
                continue
            for index in range(slots):
                try:
                    fd = os.open(os.path.join(directory, "slot-%d" % index), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    continue
                os.close(fd)
                with open(log, "a") as out:
                    out.write(json.dumps({"op": "take", "slot": index, "node": node, "at": time.time()}) + "\\n")
                return index
            time.sleep(interval)
    index = int(op.split(":")[1])
    with open(log, "a") as out:
        out.write(json.dumps({"op": "give", "slot": index, "node": node, "at": time.time()}) + "\\n")
    os.unlink(os.path.join(directory, "slot-%d" % index))
    return index
"""

ACTION = (
    SLOT_CODE
    + """
from ansible.plugins.action import ActionBase

class ActionModule(ActionBase):
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        a = self._task.args
        result.update(changed=True, slot=slot(a["op"], a["dir"], int(a["slots"]), a["node"]))
        return result
"""
)

MODULE = (
    "#!/usr/bin/python\n"
    + SLOT_CODE
    + """
from ansible.module_utils.basic import AnsibleModule

def main():
    m = AnsibleModule(argument_spec={"op": {}, "dir": {}, "slots": {"type": "int"}, "node": {}})
    p = m.params
    m.exit_json(changed=True, slot=slot(p["op"], p["dir"], p["slots"], p["node"]))

if __name__ == "__main__":
    main()
"""
)

FREE = """---
- name: Maintain the nodes
  hosts: nodes
  gather_facts: false
  strategy: ansible.builtin.{strategy}
  serial: {serial}
  tasks:
    - name: Take a slot
      {step}: {{op: take, dir: "{dir}", slots: {slots}, node: "{{{{ inventory_hostname }}}}"}}
      {delegate}
      register: taken
    - name: Run the maintenance
      ansible.builtin.wait_for:
        timeout: {seconds}
    - name: Give the slot back
      {step}: {{op: "give:{{{{ taken.slot }}}}", dir: "{dir}", slots: {slots}, node: "{{{{ inventory_hostname }}}}"}}
      {delegate}
"""

WAVES_HEAD = """---
- name: Plan the waves
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Add the driver
      ansible.builtin.add_host:
        name: driver
        ansible_connection: local
        ansible_python_interpreter: "{python}"
        waves_left: "{{{{ groups['nodes'] | batch({slots}) | list }}}}"
        wave_hosts: "{{{{ ['driver'] + (groups['nodes'] | batch({slots}) | first) }}}}"
"""

WAVE = """
- name: A wave
  hosts: "{{{{ hostvars['driver']['wave_hosts'] if hostvars is defined and 'driver' in hostvars else [] }}}}"
  gather_facts: false
  strategy: ansible.builtin.linear
  tasks:
    - name: Take the wave's slots
      bench_slot_action: {{op: take, dir: "{dir}", slots: {slots}, node: "{{{{ item }}}}"}}
      loop: "{{{{ waves_left[0] }}}}"
      run_once: true
      register: taken
      when: inventory_hostname == 'driver'
    - name: Run the maintenance
      ansible.builtin.wait_for:
        timeout: {seconds}
      when: inventory_hostname != 'driver'
    - name: Give the slots back
      bench_slot_action: {{op: "give:{{{{ item.slot }}}}", dir: "{dir}", slots: {slots}, node: "{{{{ item.item }}}}"}}
      loop: "{{{{ taken.results }}}}"
      run_once: true
      when: inventory_hostname == 'driver'
    - name: Name the next wave
      ansible.builtin.set_fact:
        waves_left: "{{{{ waves_left[1:] }}}}"
        wave_hosts: "{{{{ [] if waves_left | length < 2 else ['driver'] + waves_left[1] }}}}"
      run_once: true
      when: inventory_hostname == 'driver'
"""


def write_files(work: Path, args: argparse.Namespace) -> dict[str, Path]:
    (work / "action_plugins").mkdir()
    (work / "action_plugins" / "bench_slot_action.py").write_text(ACTION)
    (work / "library").mkdir()
    (work / "library" / "bench_slot_module.py").write_text(MODULE)
    hosts = "\n".join(f"node-{i:05d}" for i in range(args.nodes))
    (work / "inventory").write_text(
        f"[nodes]\n{hosts}\n[nodes:vars]\nansible_connection=local\nansible_python_interpreter={sys.executable}\n"
    )
    common = {"dir": "{dir}", "slots": args.slots, "seconds": args.maintenance}
    one = {**common, "serial": 0}  # 0: every host in one batch
    playbooks = {
        "pinned-action": FREE.format(step="bench_slot_action", delegate="", strategy="host_pinned", **one),
        "pinned-module": FREE.format(
            step="bench_slot_module", delegate="delegate_to: localhost", strategy="host_pinned", **one
        ),
        "free-action": FREE.format(step="bench_slot_action", delegate="", strategy="free", **one),
        "pinned-serial": FREE.format(
            step="bench_slot_action", delegate="", strategy="host_pinned", **common, serial=args.batch
        ),
        "waves": WAVES_HEAD.format(slots=args.slots, python=sys.executable) + WAVE.format(**common) * COPIES,
    }
    out = {}
    for name, text in playbooks.items():
        out[name] = work / f"{name}.yml"
        out[name].write_text(text)
    return out


def run(work: Path, playbook: Path, forks: int, timeout: float) -> dict[str, float]:
    """One shape: its wall and CPU time, how many nodes it maintained, and the slots' idle times. A shape that
    does not finish within ``timeout`` is stopped; ``stuck`` then says so."""
    slots = work / f"slots-{playbook.stem}"
    slots.mkdir()
    playbook.write_text(playbook.read_text().replace("{dir}", str(slots)))
    env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    command = [str(BIN / "ansible-playbook"), "-i", str(work / "inventory"), "-f", str(forks), str(playbook)]
    with subprocess.Popen(command, env=env, cwd=work, stdout=subprocess.DEVNULL, start_new_session=True) as proc:
        try:
            stuck = proc.wait(timeout=timeout) is None
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            stuck = True
        else:
            if proc.returncode:
                raise SystemExit(f"{playbook.name}: ansible-playbook failed (rc {proc.returncode})")
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    log = slots / "log"
    events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    idle = slot_idle(events)
    return {
        "wall": wall,
        "cpu": cpu,
        "stuck": stuck,
        "nodes": len([e for e in events if e["op"] == "give"]),
        "idle_median": statistics.median(idle) if idle else 0.0,
        "idle_max": max(idle, default=0.0),
    }


def slot_idle(events: list[dict[str, object]]) -> list[float]:
    """For each slot given back and taken again: how long it stood free."""
    freed: dict[object, float] = {}
    idle = []
    for event in sorted(events, key=lambda e: float(e["at"])):  # type: ignore[arg-type]
        at = float(event["at"])  # type: ignore[arg-type]
        if event["op"] == "give":
            freed[event["slot"]] = at
        elif event["slot"] in freed:
            idle.append(at - freed.pop(event["slot"]))
    return idle


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--slots", type=int, default=20)
    parser.add_argument("--maintenance", type=float, default=2.0)
    parser.add_argument("--forks", type=int, default=0, help="default: 2 * slots + 1")
    parser.add_argument("--shapes", nargs="+", default=["waves", "pinned-action", "pinned-module"])
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a shape may take")
    parser.add_argument("--batch", type=int, default=0, help="pinned-serial's serial batch (default: 4 * slots)")
    args = parser.parse_args()
    args.batch = args.batch or 4 * args.slots
    forks = args.forks or 2 * args.slots + 1
    ideal = math.ceil(args.nodes / args.slots) * args.maintenance
    print(f"{args.nodes} nodes, {args.slots} slots, {args.maintenance:g}s maintenance, -f {forks}: ideal {ideal:.0f}s")
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    results = {}
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        playbooks = write_files(Path(tmp), args)
        for shape in args.shapes:
            r = run(Path(tmp), playbooks[shape], forks, args.timeout)
            if r["stuck"]:
                print(f"{shape:>13}: stuck, stopped after {r['wall']:.0f}s with {r['nodes']} node(s) maintained")
                continue
            results[shape] = r
            assert r["nodes"] == args.nodes, f"{shape}: {r['nodes']} nodes maintained, not {args.nodes}"
            print(
                f"{shape:>13}: {r['wall']:7.1f}s wall ({r['wall'] / ideal:.2f}x ideal), "
                f"{r['cpu'] * 1000 / args.nodes:7.1f} CPU-s per 1,000 nodes, slot idle median "
                f"{r['idle_median']:.2f}s max {r['idle_max']:.2f}s"
            )
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if "waves" in results:
        base = results["waves"]
        for shape, r in results.items():
            if shape != "waves":
                print(
                    f"{shape} against waves: wall {base['wall'] / r['wall']:.2f}x faster, "
                    f"CPU {r['cpu'] / base['cpu']:.2f}x"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
