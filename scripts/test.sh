#!/usr/bin/env bash
# Install (if needed) and run the default test suite: unit tests, components
# against local doubles, and end-to-end tests against a real vf-vllm server on
# loopback with a tiny model. Extra arguments go to pytest (e.g. -m slow).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# shellcheck disable=SC1091
. .venv/bin/activate
source scripts/env.sh
if [ "$#" -eq 0 ]; then set -- -m "not slow"; fi
python -m pytest -q "$@"
