#!/usr/bin/env bash
# Install, initialise (once) and serve MemoryBridge on the embedded default (SQLite + local
# Qdrant under ./data). Arguments go to `memory-bridge serve` (e.g. --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."

export MEM0_TELEMETRY=False
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e .

data_dir="$(.venv/bin/python -c 'from memory_bridge.settings import Settings; print(Settings().memory_bridge_data_dir)')"
if [ ! -f "$data_dir/.initialized" ] || [ -f "$data_dir/.initializing" ]; then
    .venv/bin/memory-bridge init --admin-token-file "$data_dir/admin-token"
    echo "The admin token is also in $data_dir/admin-token (mode 0600)."
fi
exec .venv/bin/memory-bridge serve "$@"
