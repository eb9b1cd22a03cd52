# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The int_or_percent filter: an int-or-percent setting, checked, with the type Kubernetes expects."""

from __future__ import annotations

DOCUMENTATION = r"""
name: int_or_percent
short_description: Check an int-or-percent setting and give it the type Kubernetes expects
version_added: 0.1.0
author:
  - nodeops.maintenance contributors (@nodeops)
description:
  - Returns an integer for V(3) or V("3") (a number that came in as text, as from C(-e name=3)), and the
    string V(20%) for a whole percentage, which is what C(maxParallelOperations), C(maxUnavailable) and
    C(minHealthy) take.
  - Anything else (V("10.5%"), V("-5%"), V(abc), a boolean) fails with a message that names the setting.
  - The type survives on every supported ansible-core, also where templates return text.
options:
  _input:
    description: The value to check.
    type: raw
    required: true
  name:
    description: The name of the setting, used in the error message.
    type: str
    default: value
"""

EXAMPLES = r"""
- name: Build the spec of a MaintenanceOperatorConfig from survey answers
  ansible.builtin.set_fact:
    config_spec:
      maxParallelOperations: "{{ max_parallel | nodeops.maintenance.int_or_percent('max_parallel') }}"
      maxUnavailable: "{{ max_unavailable | nodeops.maintenance.int_or_percent('max_unavailable') }}"
"""

RETURN = r"""
_value:
  description: The integer, or the percentage string.
  type: raw
  sample: 3
"""

import re  # noqa: E402
from typing import Any  # noqa: E402

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.nodeops.maintenance.plugins.module_utils.core.intorpercent import IntOrPercentError, parse  # noqa: E402

# [0-9], not \d: \d (like int()) takes every Unicode decimal digit, such as "٣" (U+0663).
_DIGITS = re.compile(r"\s*-?[0-9]+\s*")


def int_or_percent(value: Any, name: str = "value") -> int | str:
    """``3`` or ``"3"`` -> 3, ``"20%"`` -> ``"20%"``; anything else fails naming ``name``."""
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        return int(value)
    try:
        number, is_percent = parse(value, name)
    except IntOrPercentError as err:
        raise AnsibleFilterError(str(err)) from err
    return f"{number}%" if is_percent else number


class FilterModule:
    """nodeops.maintenance filter for int-or-percent settings."""

    def filters(self) -> dict[str, Any]:
        return {"int_or_percent": int_or_percent}
