# Environment shared by the scripts: offline, caches inside the checkout.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false
_vf_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export VF_CACHE_DIR="${VF_CACHE_DIR:-$_vf_root/.cache/verifiers}"
export VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$_vf_root/.cache/vllm}"
export TORCH_EXTENSIONS_DIR="${TORCH_EXTENSIONS_DIR:-$_vf_root/.cache/torch_extensions}"
export OPENAI_API_KEY="${OPENAI_API_KEY:-EMPTY}"
unset _vf_root
