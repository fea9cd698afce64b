"""Summarise a py-spy profile in collapsed-stack form (`py-spy record --format raw`).

    python scripts/bench/flame.py profile.txt [--top 25]

Each input line is `frame;frame;...;frame COUNT`, outermost frame first; with `--threads`
the first frame names the thread. Prints where the samples are: per thread, per package
(inclusive: the share of samples with that package anywhere on the stack), and the top
functions by inclusive and by self time. The same file loads into speedscope.app or
flamegraph.pl for the picture.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")

# Path fragments → a package label, first match wins.
PACKAGES = (
    ("memory_bridge/", "memory_bridge"),
    ("sqlalchemy/", "sqlalchemy"),
    ("<sqlalchemy", "sqlalchemy"),
    ("typer/", "typer/click"),
    ("click/", "typer/click"),
    ("<frozen runpy>", "runpy"),
    ("aiosqlite/", "aiosqlite"),
    ("sqlite3/", "sqlite3"),
    ("httpcore/", "httpcore"),
    ("httpx/", "httpx"),
    ("h11/", "h11"),
    ("anyio/", "anyio"),
    ("starlette/", "starlette"),
    ("fastapi/", "fastapi"),
    ("uvicorn/", "uvicorn"),
    ("pydantic/", "pydantic"),
    ("pydantic_core/", "pydantic"),
    ("json/", "json"),
    ("asyncio/", "asyncio"),
    ("logging/", "logging"),
    ("threading.py", "threading"),
    ("concurrent/", "concurrent.futures"),
    ("queue.py", "queue"),
)


# Entry points that are on every stack and say nothing about the step.
_OUTER = re.compile(r"^(<module>|main|serve) \(")


def activity_of(frames: list[str]) -> str:
    """What a sample's stack is busy with, for a proxy built like MemoryBridge."""
    if not frames:
        return "(stack unreadable)"
    files = [file_of(f) for f in frames]
    packages = {package_of(f) for f in files}
    ours = [f for f in frames if "memory_bridge/" in file_of(f) and not _OUTER.match(f)]
    if packages & {"sqlalchemy", "aiosqlite", "sqlite3"} or any("/storage/" in f for f in files):
        return "database (SQLAlchemy, aiosqlite, sqlite3)"
    if packages & {"httpx", "httpcore", "h11"}:
        return "upstream HTTP client (httpx, httpcore, h11)"
    if ours:
        return "memory_bridge code (with the framework calls under it)"
    if packages & {"fastapi", "starlette"}:
        return "FastAPI / Starlette"
    if "uvicorn" in packages and any("uvicorn/protocols" in f for f in files):
        return "uvicorn (HTTP parsing, writing responses)"
    if "anyio" in packages:
        return "anyio (task groups, cancel scopes)"
    return "event loop and other"


def package_of(file: str) -> str:
    for fragment, label in PACKAGES:
        if fragment in file:
            return label
    return Path(file).name or "?"


def file_of(frame: str) -> str:
    match = _FRAME.match(frame)
    return match["file"] if match else frame


def short(frame: str) -> str:
    """`func (path/to/pkg/mod.py:12)` → `func (pkg/mod.py)`."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    parts = Path(match["file"]).parts
    tail = "/".join(parts[-2:]) if len(parts) >= 2 else match["file"]
    return f"{match['func']} ({tail})"


def parse(text: str) -> list[tuple[list[str], int]]:
    stacks = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def summarise(text: str, top: int = 25) -> str:
    stacks = parse(text)
    total = sum(n for _, n in stacks)
    if not total:
        return "no samples"
    threads: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    activity: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    for frames, n in stacks:
        thread = frames[0] if frames and frames[0].startswith(("thread", "process")) else ""
        body = frames[1:] if thread else frames
        threads[thread or "(all)"] += n
        for label in {package_of(file_of(f)) for f in body}:
            packages[label] += n
        for name in {short(f) for f in body}:
            inclusive[name] += n
        if body:
            self_time[short(body[-1])] += n
        activity[activity_of(body)] += n

    def pct(n: int) -> str:
        return f"{100 * n / total:5.1f}%"

    out = [f"{total} samples (idle threads are not sampled)", "", "by thread:"]
    out += [f"  {pct(n)}  {name}" for name, n in threads.most_common(8)]
    out += ["", "by package (inclusive: on the stack at all):"]
    out += [f"  {pct(n)}  {name}" for name, n in packages.most_common(18)]
    out += ["", "by activity (each sample counted once, first matching rule):"]
    out += [f"  {pct(n)}  {name}" for name, n in activity.most_common()]
    out += ["", f"top {top} functions, inclusive:"]
    out += [f"  {pct(n)}  {name}" for name, n in inclusive.most_common(top)]
    out += ["", f"top {top} functions, self:"]
    out += [f"  {pct(n)}  {name}" for name, n in self_time.most_common(top)]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    print(summarise(args.profile.read_text(), args.top))


if __name__ == "__main__":
    main()
