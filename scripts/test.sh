#!/usr/bin/env bash
# Install everything the tests need into .venv (from scratch on a fresh machine), then run
# the linters, the type checker and the test suite with its coverage gate.
set -euo pipefail
cd "$(dirname "$0")/.."

export MEM0_TELEMETRY=False HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
python="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$python" -m venv .venv
# The CPU build of torch first (PyTorch's CPU index when it answers, else the pinned version:
# see scripts/install.py), then the project with its test extras and the local embedder.
.venv/bin/python scripts/install.py torch
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test,local]"

# The console's browser tests drive Debian's chromium (tests/e2e/test_console_browser.py);
# without it they skip, saying so. Never a browser download (no `playwright install`).
if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get install -y chromium || echo "chromium could not be installed: browser tests skip"
    else
        echo "chromium is missing and cannot be installed here (not root): browser tests skip"
    fi
fi

.venv/bin/ruff check src tests scripts
.venv/bin/ruff format --check src tests scripts
.venv/bin/mypy --strict src
if [ "$#" -gt 0 ]; then
    exec .venv/bin/python -m pytest "$@"
fi
# Unit and integration tests in two processes (a test file stays in one: it shares its servers);
# then the end-to-end tests not marked `serial` the same way; then the `serial` ones one at a
# time: they kill processes, drive load or read descriptors and memory, which a neighbour would
# disturb. Coverage adds up over the three runs; the gate is on the last.
.venv/bin/python -m pytest -n 2 --dist loadfile --cov --cov-report= tests/unit tests/integration
.venv/bin/python -m pytest -n 2 --dist loadfile -m "not serial" --cov --cov-append --cov-report= \
    tests/e2e
.venv/bin/python -m pytest -m serial --cov --cov-append --cov-report=term --cov-fail-under=90 \
    tests/e2e
