#!/usr/bin/env bash
# The main job: builds kvring's tools and examples in release mode and plans the embedded
# default model (gemma-3-27b at its full context, batch 512).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target kvring-plan plan_custom_model
./build/release/tools/kvring-plan "$@"
