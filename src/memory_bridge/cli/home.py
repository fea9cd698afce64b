"""Where the CLI finds its install from any folder: `--home` (or `MEMORY_BRIDGE_HOME`), the
folder `scripts/run.sh` installed into (its `.env`, `data/`, `templates/`), and `--data-dir`.

Settings are read from the environment and from `.env` in the current folder, with relative
paths (`data`, `templates/...`) meaning the current folder: without these the CLI only worked
from the install's folder. With a home, its `.env` fills in what the environment does not set
(the environment wins, as it does over any `.env`), and the relative path settings are made
absolute under the home. Other relative paths given on the command line keep meaning the
current folder: nothing changes directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from dotenv import dotenv_values

HOME_ENV = "MEMORY_BRIDGE_HOME"
DATA_DIR_ENV = "MEMORY_BRIDGE_DATA_DIR"
# The path settings whose defaults are relative to the install's folder.
_RELATIVE_DEFAULTS = {
    DATA_DIR_ENV: "data",
    "MEMORY_TEMPLATE_PATH": "templates/memory_template.md",
    "MEMORY_TEMPLATE_ZH_PATH": "templates/memory_template_zh.md",
}


class NoHome(Exception):
    pass


def use_home(home: Path | None, data_dir: Path | None) -> None:
    if home is not None:
        home = home.expanduser().resolve()
        if not home.is_dir():
            raise NoHome(f"{home}: no such folder (--home or ${HOME_ENV})")
        dotenv = home / ".env"
        if dotenv.is_file():
            for key, value in dotenv_values(dotenv).items():
                if value is not None:
                    os.environ.setdefault(key.upper(), value)
        for key, default in _RELATIVE_DEFAULTS.items():
            path = Path(os.environ.get(key) or default).expanduser()
            if not path.is_absolute():
                os.environ[key] = str(home / path)
    if data_dir is not None:
        os.environ[DATA_DIR_ENV] = str(data_dir.expanduser().resolve())
