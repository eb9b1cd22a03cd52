"""The dependency collections the tests load are versions galaxy.yml allows: the installed Ansible package bundles a
community.crypto outside its range, so the tests take one from an older Ansible package
(tests/support/dependency_collections.py). Asked of ansible-core, with the ANSIBLE_COLLECTIONS_PATH of the tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import dependency_collections
from support.ansible_cli import clean_env

DEPENDENCIES = dependency_collections.dependencies()


@pytest.fixture(scope="module")
def loaded() -> dict[str, Path]:
    return dependency_collections.loaded(sorted(DEPENDENCIES), clean_env())


def test_galaxy_yml_has_the_dependencies_of_the_node_agent_role() -> None:
    assert set(DEPENDENCIES) == {"community.crypto", "kubernetes.core"}
    assert set(dependency_collections.TAKEN) <= set(DEPENDENCIES)


@pytest.mark.parametrize("name", sorted(DEPENDENCIES))
def test_the_tests_load_a_version_galaxy_yml_allows(name: str, loaded: dict[str, Path]) -> None:
    if name not in loaded:  # the oldest ansible-core's environment (make compat) has no kubernetes.core
        pytest.skip(f"{name} is not installed here; the tests of the node_agent role are skipped too")
    version = dependency_collections.version(loaded[name])
    assert dependency_collections.allows(DEPENDENCIES[name], version), (
        f"the tests load {name} {version} from {loaded[name]}, outside galaxy.yml's range {DEPENDENCIES[name]!r}"
    )


@pytest.mark.parametrize("name", dependency_collections.TAKEN)
def test_a_collection_taken_from_the_pinned_ansible_package_is_the_one_loaded(
    name: str, loaded: dict[str, Path]
) -> None:
    assert loaded[name].resolve() == dependency_collections.cached(name).resolve()
