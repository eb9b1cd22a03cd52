#!/usr/bin/python
# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: check_variables
short_description: Warn about playbook variables that look like a playbook's own but are none of them
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Compares the names of the variables the task sees (extra variables, inventory and play variables, facts) with
    the names a playbook knows, O(known). A variable that starts like the known ones (with one of O(prefixes)) but
    is none of them is almost always a typo, which Ansible would otherwise ignore without a word, for example
    C(-e rolling_maxParallelOperations=3) for C(rolling_max_parallel_operations). Each is named with the closest
    known name.
  - The playbooks of this collection run it among their first tasks, with the options of their argument spec and
    of the roles they run; use it in playbooks of your own the same way.
  - Runs on the controller only and reads no host.
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  action:
    description: >-
      Indicates this has a corresponding action plugin so some parts of the options can be executed on the
      controller.
    support: full
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: all
options:
  known:
    description: The names of the playbook's variables, for example the options of its argument spec.
    type: list
    elements: str
    required: true
  prefixes:
    description:
      - Only variables whose names start with one of these are compared with O(known).
      - By default the prefixes O(known) shows, for each first word that two or more known names share, their
        longest common prefix up to an underscore (V(rolling_) for C(rolling_run_id) and C(rolling_engine)).
    type: list
    elements: str
    default: []
  unknown:
    description: V(warn) warns once for each unknown variable; V(fail) fails the task, naming them all.
    type: str
    choices: [warn, fail]
    default: warn
"""

EXAMPLES = r"""
- name: Warn about misspelt variables of this playbook
  nodeops.maintenance.check_variables:
    known: "{{ upgrade_spec.argument_specs.main.options | list }}"
  vars:
    upgrade_spec: "{{ lookup('ansible.builtin.file', 'upgrade.meta.yml') | ansible.builtin.from_yaml }}"

- name: Refuse any unknown variable that starts with upgrade_
  nodeops.maintenance.check_variables:
    known: [upgrade_version, upgrade_hosts]
    prefixes: [upgrade_]
    unknown: fail
"""

RETURN = r"""
unknown:
  description: Each unknown variable, with the sentence that names it and the closest known name.
  returned: always
  type: dict
  sample:
    rolling_maxParallelOperations: >-
      rolling_maxParallelOperations is not a variable of this playbook; did you mean
      rolling_max_parallel_operations?
"""
