#!/usr/bin/env bash
# Install (if needed) and run the default test suite: unit tests, components
# against local doubles, and end-to-end tests against a real vf-vllm server on
# loopback with a tiny model: the tier a bare `pytest` selects (pyproject.toml's addopts).
# Extra arguments go to pytest (e.g. -m slow: the slow tier instead).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
# shellcheck disable=SC1091
. .venv/bin/activate
source scripts/env.sh
python -m pytest -q "$@"
