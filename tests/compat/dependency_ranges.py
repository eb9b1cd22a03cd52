# Copyright (c) nodeops.maintenance contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check galaxy.yml's dependency ranges and meta/runtime.yml against the oldest supported ansible-core.

Usage: ``python dependency_ranges.py OLDEST_CORE SOURCE...`` where each SOURCE is an ``ansible`` package wheel or
an ``ansible_collections`` directory (an installed ``ansible`` package): the collection versions they bundle, with
their ``requires_ansible``, are the versions this check knows. Run with the oldest ansible-core (``make compat``),
so the ranges are read the way that ansible-galaxy reads them.

It fails when

- meta/runtime.yml's ``requires_ansible`` leaves out OLDEST_CORE, or takes the minor release before it (the
  collection claims OLDEST_CORE as its oldest);
- a dependency's range allows no known version whose ``requires_ansible`` takes OLDEST_CORE;
- a dependency's range allows a known version whose ``requires_ansible`` leaves out OLDEST_CORE: ansible-galaxy
  installs the newest version a range allows, whatever ansible-core runs it, so that version could be the one
  installed next to OLDEST_CORE.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def _known_versions(source: Path, names: list[str]) -> dict[str, dict[str, str]]:
    """{collection: {version: requires_ansible}} for the named collections a wheel or directory holds."""
    found: dict[str, dict[str, str]] = {}
    for name in names:
        path = "/".join(name.split(".")) + "/"
        if source.is_file():
            with zipfile.ZipFile(source) as wheel:
                try:
                    manifest = wheel.read("ansible_collections/" + path + "MANIFEST.json")
                    runtime = wheel.read("ansible_collections/" + path + "meta/runtime.yml")
                except KeyError:
                    continue
        else:
            if not (source / path / "MANIFEST.json").is_file():
                continue
            manifest = (source / path / "MANIFEST.json").read_bytes()
            runtime = (source / path / "meta" / "runtime.yml").read_bytes()
        version = json.loads(manifest)["collection_info"]["version"]
        requires = (yaml.safe_load(runtime) or {}).get("requires_ansible", "")
        found.setdefault(name, {})[version] = requires
    return found


def check(oldest: str, sources: list[Path]) -> list[str]:
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    oldest_version = Version(oldest)
    problems = []
    own = SpecifierSet(runtime["requires_ansible"])
    previous_minor = f"{oldest_version.major}.{oldest_version.minor - 1}.999"
    if oldest not in own or previous_minor in own:
        problems.append(
            f"meta/runtime.yml requires_ansible {runtime['requires_ansible']!r} should start at "
            f"{oldest_version.major}.{oldest_version.minor}, the oldest supported ansible-core"
        )
    dependencies = galaxy.get("dependencies") or {}
    known: dict[str, dict[str, str]] = {}
    for source in sources:
        for name, versions in _known_versions(source, list(dependencies)).items():
            known.setdefault(name, {}).update(versions)
    for name, requirement in dependencies.items():
        allowed = {
            version: requires
            for version, requires in known.get(name, {}).items()
            if meets_requirements(version, requirement)
        }
        good = sorted(version for version, requires in allowed.items() if oldest in SpecifierSet(requires))
        bad = sorted(version for version, requires in allowed.items() if oldest not in SpecifierSet(requires))
        print(
            f"{name} {requirement!r}: known {sorted(known.get(name, {}))}, allowed and taking ansible-core "
            f"{oldest}: {good}"
        )
        if not good:
            problems.append(f"{name} {requirement!r} allows no known version that takes ansible-core {oldest}")
        for version in bad:
            problems.append(
                f"{name} {requirement!r} allows {version}, whose requires_ansible {allowed[version]!r} leaves out "
                f"ansible-core {oldest}"
            )
    return problems


def main() -> int:
    problems = check(sys.argv[1], [Path(arg) for arg in sys.argv[2:]])
    for problem in problems:
        print("dependency ranges:", problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
