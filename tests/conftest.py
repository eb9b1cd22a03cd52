"""Make the collection importable as ``ansible_collections.nodeops.maintenance``.

When the checkout already sits at ``.../ansible_collections/nodeops/maintenance`` (as
``ansible-test`` wants) that tree is used; otherwise ``.build/collections`` gets a symlink to
the checkout. ``ANSIBLE_COLLECTIONS_PATH`` is set to the same place, so the ``ansible`` and
``ansible-playbook`` commands that integration tests run find this collection. A community.crypto that
galaxy.yml allows is linked there too, ahead of the installed Ansible package's
(tests/support/dependency_collections.py; the first run downloads it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from support import dependency_collections

ROOT = Path(__file__).resolve().parent.parent


def collections_root() -> Path:
    if ROOT.parent.name == "nodeops" and ROOT.parent.parent.name == "ansible_collections":
        return ROOT.parent.parent.parent
    base = ROOT / ".build" / "collections"
    link = base / "ansible_collections" / "nodeops" / "maintenance"
    if not link.exists():
        link.parent.mkdir(parents=True, exist_ok=True)
        try:
            link.symlink_to(ROOT, target_is_directory=True)
        except FileExistsError:  # another pytest-xdist worker made it at the same moment
            if not link.exists():
                raise
    dependency_collections.link(base)
    return base


COLLECTIONS_ROOT = collections_root()
if str(COLLECTIONS_ROOT) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS_ROOT))
os.environ["ANSIBLE_COLLECTIONS_PATH"] = str(COLLECTIONS_ROOT)
