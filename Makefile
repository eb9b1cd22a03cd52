# nodeops.maintenance: developer and CI entry points. `make test` is what CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BUILD := .build
# A copy of the tracked tree placed where ansible-test wants it.
SANITY_TREE := $(BUILD)/sanity/ansible_collections/nodeops/maintenance
# ansible-test's own home: its venvs and its pip bootstrap script (see tests/sanity/get_pip_shim.py)
SANITY_HOME := $(abspath $(BUILD)/ansible-test-home)
# the pip version ansible-test bootstraps into its venvs, read from the installed ansible-test
ANSIBLE_TEST_PIP = $(shell sed -n "s/^ *pip='\(.*\)',$$/\1/p" $(VENV)/lib/python3.11/site-packages/ansible_test/_internal/python_requirements.py | tr . _)
COLLECTIONS := $(abspath $(BUILD)/collections)
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export PATH := $(abspath $(BIN)):$(PATH)
ANSIBLE_VERSION := $(shell sed -n 's/^ansible-core==\([0-9]*\.[0-9]*\).*/\1/p' tests/requirements.txt)

# pytest-xdist workers for the integration tests; they mostly wait on their control planes.
INTEGRATION_WORKERS ?= 3

# The oldest ansible-core the collection supports (meta/runtime.yml), for `make compat`.
CORE_COMPAT := 2.16.19
COMPAT_VENV := $(BUILD)/core-$(CORE_COMPAT)
# The Ansible package of that ansible-core line: the versions of the dependency collections built for it, against
# which `make compat` checks galaxy.yml's dependency ranges (with those of the Ansible package in $(VENV) and those
# the tests take from tests/requirements-collections.txt).
ANSIBLE_COMPAT := 9.13.0

.PHONY: test test-under-load checks venv binaries dependency-collections lint crd-schemas playbook-docs unit integration collection-docs sanity ansible-lint molecule build-check compat demo cluster-up cluster-down cluster-status clean

# The integration tests wait on the cluster more than they compute, so the checks that need no cluster run
# beside them (each side's output is shown when it ends).
test: venv binaries dependency-collections lint
	$(MAKE) --no-print-directory -j2 --output-sync=target integration checks
	@echo "make test: all checks passed"

# `make test` beside one busy process per core (nproc) at normal priority, as on a loaded CI machine: a test
# that assumes how fast something happens fails here. The busy loops are started first and stopped by PID
# when the run ends, also when it fails or is interrupted.
test-under-load:
	@busy=(); \
	stop_busy() { if [ $${#busy[@]} -gt 0 ]; then kill $${busy[@]} 2>/dev/null || true; wait $${busy[@]} 2>/dev/null || true; fi; }; \
	trap stop_busy EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	for _ in $$(seq "$$(nproc)"); do ( while :; do :; done ) & busy+=($$!); done; \
	echo "== make test under load: $${#busy[@]} busy processes (PIDs $${busy[*]})"; \
	$(MAKE) --no-print-directory test

# The checks that need no cluster, one after the other.
checks: venv
	for check in unit collection-docs sanity ansible-lint molecule build-check; do $(MAKE) --no-print-directory $$check || exit 1; done

venv: $(VENV)/.installed
$(VENV)/.installed: tests/requirements.txt requirements.txt
	@echo "== creating $(VENV) with the pinned test tools (tests/requirements.txt)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt -r tests/requirements.txt
	@mkdir -p $(COLLECTIONS)/ansible_collections/nodeops
	@ln -sfn $(CURDIR) $(COLLECTIONS)/ansible_collections/nodeops/maintenance
	touch $@

# galaxy.yml's dependencies at versions it allows: community.crypto from the Ansible package pinned in
# tests/requirements-collections.txt (downloaded once into the cache), linked into $(COLLECTIONS) ahead of the
# installed Ansible package's; then the version of each that the ansible commands load, checked against its range.
# tests/conftest.py links it too, for pytest run by hand.
dependency-collections: venv
	@echo "== dependency collections at versions galaxy.yml allows"
	$(BIN)/python tests/support/dependency_collections.py $(COLLECTIONS)

binaries: venv
	@echo "== control-plane binaries (built once into the cache, then reused)"
	$(BIN)/python tests/cluster/build.py
	# the NVIDIA Maintenance Operator when $$NODEOPS_NVIDIA_OPERATOR_SRC names its source; otherwise it says how
	$(BIN)/python tests/cluster/nvidia_operator.py
	# Prometheus and its Pushgateway from the Debian archive, for the gate and metrics tests
	$(BIN)/python tests/cluster/debian_tools.py

# The strict reader's schemas (plugins/module_utils/core/crd_schemas.py), again from roles/crds/files after a CRD
# changed; a unit test fails while they differ.
crd-schemas: venv
	$(BIN)/python tests/support/crd_schemas.py

# docs/playbooks.md, again from the playbooks' argument specs (playbooks/*.meta.yml) after one changes.
playbook-docs: venv
	$(BIN)/python tests/support/playbook_docs.py

lint: venv
	@echo "== ruff"
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@echo "== mypy (plugins)"
	cd $(COLLECTIONS) && $(abspath $(BIN))/mypy --config-file $(CURDIR)/pyproject.toml --cache-dir $(abspath $(BUILD))/mypy-cache \
	  -p ansible_collections.nodeops.maintenance.plugins
	@echo "== vermin: the files the node_agent role ships (the agent, node_agent_core_files) run on Python 3.9"
	# every annotation is postponed (from __future__ import annotations, checked by the unit tests), so none is
	# evaluated; no "# novm" comment exempts a line; a file this Python cannot parse fails (--pessimistic)
	core=$$($(BIN)/python -c 'import yaml; print(*("plugins/module_utils/core/node/" + name for name in \
	  yaml.safe_load(open("roles/node_agent/vars/main.yml"))["node_agent_core_files"]))') && \
	  $(BIN)/vermin --no-config-file --target=3.9- --violations --no-tips --no-eval-annotations --no-parse-comments --pessimistic \
	    roles/node_agent/files/nodeops_node_agent.py $$core

unit: venv
	@echo "== unit tests"
	$(BIN)/python -m pytest tests/unit -q -n 2

integration: venv binaries
	@echo "== integration tests against the real control plane"
	# $(INTEGRATION_WORKERS) workers, each with its own control plane; a test file stays on one worker
	$(BIN)/python -m pytest tests/integration -q -n $(INTEGRATION_WORKERS) --dist loadfile --durations=15

# The changelog fragments, and the documentation as docs.ansible.com renders it (antsibull-docs reads the plugins'
# documentation through ansible-doc, and the collection through ansible-galaxy on PATH).
collection-docs: venv
	@echo "== antsibull-changelog lint; antsibull-docs lint-collection-docs"
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-docs lint-collection-docs --plugin-docs .

sanity: venv
	@echo "== ansible-test sanity (ansible-core $(ANSIBLE_VERSION), Python 3.11)"
	rm -rf $(SANITY_TREE) && mkdir -p $(SANITY_TREE)
	git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t $(SANITY_TREE)
	@mkdir -p $(SANITY_HOME)/.ansible/test/cache $(SANITY_HOME)/.config/pip
	$(BIN)/python tests/sanity/pip_config.py > $(SANITY_HOME)/.config/pip/pip.conf
	cp tests/sanity/get_pip_shim.py $(SANITY_HOME)/.ansible/test/cache/get_pip_$(ANSIBLE_TEST_PIP).py
	# a repository of its own, or ansible-test would list files through the enclosing checkout
	cd $(SANITY_TREE) && git init -q && git add -A && \
	  HOME=$(SANITY_HOME) $(abspath $(BIN))/ansible-test sanity --venv --python 3.11 --color no

ansible-lint: venv dependency-collections
	@echo "== ansible-lint --profile production"
	$(BIN)/ansible-lint --profile production

# The node_agent role on hosts that run systemd: Debian 11, 12 and 13 root file systems (Python 3.9, 3.11, 3.13;
# debootstrap, cached in ~/.cache/nodeops-maintenance/molecule) booted with systemd-nspawn, the three agents
# each other's peers. Needs root, systemd-nspawn and debootstrap.
molecule: venv dependency-collections
	@echo "== molecule: the node_agent role on Debian 11, 12 and 13 hosts that run systemd (systemd-nspawn)"
	@if ! command -v systemd-nspawn >/dev/null || ! command -v debootstrap >/dev/null; then \
	  echo "installing Debian's systemd-container and debootstrap (needs root)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd-container debootstrap; fi
	cd roles/node_agent && $(abspath $(BIN))/molecule test

build-check: venv
	@echo "== ansible-galaxy collection build / install / ansible-doc"
	rm -rf $(BUILD)/dist $(BUILD)/installed && mkdir -p $(BUILD)/dist
	$(BIN)/ansible-galaxy collection build --output-path $(BUILD)/dist .
	@if tar -tzf $(BUILD)/dist/nodeops-maintenance-*.tar.gz | grep -E '\.key$$|node-agent-pki'; then \
	  echo "build-check: the tarball holds a key or a peer PKI directory (above)"; exit 1; fi
	# without its dependencies (Galaxy may be out of reach; `make compat` checks their ranges)
	$(BIN)/ansible-galaxy collection install --force --no-deps -p $(BUILD)/installed $(BUILD)/dist/nodeops-maintenance-*.tar.gz
	ANSIBLE_COLLECTIONS_PATH=$(abspath $(BUILD)/installed) $(BIN)/ansible-doc nodeops.maintenance.cordon | grep -q 'EXAMPLES'
	ANSIBLE_COLLECTIONS_PATH=$(abspath $(BUILD)/installed) $(BIN)/ansible-doc nodeops.maintenance.cordon | grep -q 'RETURN VALUES'

# The modules, the crds role and the unit tests under the oldest supported ansible-core; the other
# tools keep the versions of tests/requirements.txt (used as constraints).
compat: venv binaries dependency-collections
	@echo "== ansible-core $(CORE_COMPAT): dependency ranges; unit tests; cordon, crds and inventory integration tests"
	@if [ ! -x $(COMPAT_VENV)/bin/ansible ]; then \
	  $(PYTHON) -m venv $(COMPAT_VENV) && \
	  grep -v '^ansible-core' tests/requirements.txt > $(BUILD)/compat-constraints.txt && \
	  $(COMPAT_VENV)/bin/pip install --quiet --disable-pip-version-check -c $(BUILD)/compat-constraints.txt \
	    ansible-core==$(CORE_COMPAT) kubernetes pytest hypothesis cryptography; fi
	@echo "== galaxy.yml's dependency ranges and meta/runtime.yml against ansible-core $(CORE_COMPAT)"
	$(COMPAT_VENV)/bin/pip download --quiet --disable-pip-version-check --no-deps -d $(BUILD)/wheels ansible==$(ANSIBLE_COMPAT)
	$(COMPAT_VENV)/bin/python tests/compat/dependency_ranges.py $(CORE_COMPAT) $(BUILD)/wheels/ansible-$(ANSIBLE_COMPAT)-py3-none-any.whl \
	  $(VENV)/lib/python3.11/site-packages/ansible_collections $(COLLECTIONS)/ansible_collections
	$(COMPAT_VENV)/bin/python -m pytest -q tests/unit tests/integration/test_cordon.py tests/integration/test_crds.py \
	  tests/integration/test_inventory.py

# A rolling maintenance of 24 simulated nodes on the local control plane (tests/cluster/demo.py).
demo: venv binaries
	$(BIN)/python tests/cluster/demo.py

# For people: a control plane that stays up until cluster-down.
cluster-up: venv binaries
	$(BIN)/python tests/cluster/launcher.py up $(if $(NODEOPS_NVIDIA_OPERATOR_SRC),--nvidia-operator)

cluster-down: venv
	$(BIN)/python tests/cluster/launcher.py down

cluster-status: venv
	$(BIN)/python tests/cluster/launcher.py status

clean:
	rm -rf $(BUILD) tests/output
