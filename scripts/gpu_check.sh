#!/usr/bin/env bash
# The prepared GPU check (scripts/gpu_check.py): a real node on CUDA, bf16 + LoRA, every learner
# option, overlap and partial rollouts, out-of-memory recovery on a filled card; writes
# ${OUT:-.}/gpu_check.json. Under 9 minutes on one H100/H200-class GPU by design (6 steps a run,
# 9 runs and the out-of-memory one, a 0.5B-shaped model).
#
#   bash scripts/gpu_check.sh --fetch-wheels   # here, once: the wheels the GPU image lacks, into .whl/
#   bash scripts/gpu_check.sh                  # there (the device tool, carry [".whl"])
#
# The GPU image has torch, transformers, peft, msgpack and safetensors, but not pydantic or
# cryptography, which the node imports; they travel as wheels (nothing can be fetched there).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
        cryptography==50.0.2 cffi==2.1.1 pycparser==3.12)
if [[ "${1:-}" == "--fetch-wheels" ]]; then
    grep -qx "/.whl/" .git/info/exclude 2>/dev/null || echo "/.whl/" >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux_2_34_x86_64 -d .whl "${WHEELS[@]}"
    exit 0
fi
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv || true
PYTHONUNBUFFERED=1 timeout 540 python3 scripts/gpu_check.py --device cuda --out "${OUT:-.}/gpu_check.json" "$@"
