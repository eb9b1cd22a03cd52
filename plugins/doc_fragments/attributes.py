# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Attributes shared by the modules that act on a cluster."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
  action_group:
    description: Use C(group/nodeops.maintenance.k8s) in C(module_defaults) to set the connection options once.
    support: full
    membership:
      - nodeops.maintenance.k8s
"""
