# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The base class of the collection's errors: every module ends with a clean failure on any of them.

Imports nothing and is Python 3.9 syntax: the node agent ships it with the core files that use it. An error
that is a ValueError (bad input) derives from both, ``class XError(NodeopsError, ValueError)``, so that
``except ValueError`` keeps catching it.
"""

from __future__ import annotations


class NodeopsError(Exception):
    """An error of nodeops.maintenance; its message is meant for a person."""
