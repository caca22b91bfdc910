#!/usr/bin/env bash
# The main job: builds kvring's tools and examples in release mode, plans the embedded default
# model (gemma-3-27b at its full context, batch 512; arguments go to kvring-plan), then runs the
# mini engine (examples/mini_engine): a complete decode loop on kvring whose rings wrap about
# 24 times, checked bit for bit against flat storage, and the server loop (examples/serve): 64
# requests continuously batched in one KVPool of a 6 MiB budget, each checked bit for bit
# against its run alone on flat storage, then its prompt-reuse mode (serve --reuse): multi-turn
# conversations resumed through a PrefixCache after their rings wrapped, each turn checked bit
# for bit against recomputing the conversation on flat storage. Exits non-zero if any check
# fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release --target kvring-plan plan_custom_model mini_engine serve
./build/release/tools/kvring-plan "$@"
echo
./build/release/examples/mini_engine
echo
./build/release/examples/serve
echo
./build/release/examples/serve --reuse
