# kdra — the two commands a user needs: `make demo` and `make test`.
# Everything installs into .venv; Kubernetes binaries are built once into ~/.cache/kdra.

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test unit e2e node lint binaries node-binaries bench chaos soak clean

# devenv/ (the dev-only package kdra_devenv: control planes, real nodes, the demo) goes on the
# venv's path through a .pth file: importable by tests, benchmarks, hack/ and `make demo`,
# never installed into the wheel or the image.
# The runtime dependencies install at requirements.lock's versions (-c: constraints), so the
# venv a test run uses is the one the image ships, whatever the index serves that day; the test
# extras resolve freely around them.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock -e '.[test]'
	$(PY) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], "kdra-devenv.pth").write_text(str(pathlib.Path("devenv").resolve()) + "\n")'
	touch $(STAMP)

binaries:
	@bash hack/build-control-plane.sh >/dev/null

node-binaries:
	@bash hack/build-node.sh >/dev/null

## demo: local control plane + CRDs + the seed's example, printed (Ctrl-C stops)
## NODE=real: on a real kubelet node of this machine (root); the pods run and print their devices
demo: $(STAMP) binaries
	$(PY) -m kdra_devenv demo $(if $(NODE),--node $(NODE)) $(DEMO_FLAGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check operator devenv tests bench hack
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) -m hack.crdgen --check

unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

e2e: $(STAMP) binaries
	$(PY) -m pytest tests/e2e -q

## node: the real-node tier (root): containerd + kubelet, kdra deployed as pods, devices seen
node: $(STAMP) binaries node-binaries
	$(PY) -m pytest tests/node -q

## test: lint + unit + end-to-end against real etcd/kube-apiserver, then the real-node tier
test: $(STAMP) binaries node-binaries lint
	$(PY) -m pytest tests/unit tests/e2e -q
	$(PY) -m pytest tests/node -q

bench: $(STAMP)
	$(PY) bench/allocator.py

## chaos: the fault scenarios, the operator-kill one at full size (300 pods, 20 nodes x 8)
chaos: $(STAMP) binaries
	KDRA_CHAOS_FULL=1 $(PY) -m pytest tests/e2e/test_chaos.py -q -s -k operator_killed

## soak: operator + agent under a steady stream of pods for 30 min; RSS/CPU samples, invariants
soak: $(STAMP) binaries
	$(PY) bench/soak.py $(SOAK_FLAGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
