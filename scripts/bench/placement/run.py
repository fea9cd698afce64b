"""`bench_placement.py` from start to end: the fakes, one MemoryBridge per build, every
conversation driven in turn, the report; every process it started stopped at the end."""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.memorybridge import CURATED_MEMORY, CURATED_USER, MemoryBridge, start_memorybridge
from bench.placement.conversation import (
    Conversation,
    Settler,
    check_layers,
    prepare,
    run_conversation,
)
from bench.placement.prompts import CLIENT_SYSTEM, DEFAULT_WINDOW, TARGET, TARGET_FROM_TURN
from bench.placement.report import build_source, print_report, render_table, write_json
from bench.processes import (
    BENCH_DIR,
    Children,
    child_env,
    free_port,
    log,
    start_fake_upstream,
    terminate,
    wait_ready,
)

DESCRIPTION = (
    "Prompt-prefix stability of what MemoryBridge forwards, turn by turn (issue 15, placement)."
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20, help="turns per conversation (20)")
    parser.add_argument("--quick", action="store_true", help="6 turns: for the smoke test")
    parser.add_argument("--json", type=Path, help="write every figure as JSON to this file")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="also run the build whose source tree is DIR (its DIR/src), side by side",
    )
    parser.add_argument(
        "--reply-bytes",
        type=int,
        default=800,
        help="size of each upstream reply, in bytes of text (default 800, ~200 tokens)",
    )
    parser.add_argument("--gateway-hits", type=int, default=3, help="Gateway hits per turn (3)")
    parser.add_argument("--keep-temp", action="store_true", help="keep the logs and databases")
    parser.add_argument(
        "--no-reference-first",
        action="store_true",
        help="skip the conversation with memory.placement 'reference_first'",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.turns = 6
    if not 2 <= args.turns <= 500:
        parser.error("--turns must be between 2 and 500")
    if args.baseline_src is not None and not (args.baseline_src / "src").is_dir():
        parser.error(f"--baseline-src: no src/ under {args.baseline_src}")
    return args


def start_meta(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "turns": args.turns,
        "reply_bytes": args.reply_bytes,
        "gateway_hits": args.gateway_hits,
        "client_system_prompt_bytes": len(CLIENT_SYSTEM.encode()),
        "curated_bytes": {"memory": len(CURATED_MEMORY), "user": len(CURATED_USER)},
        "serialization": 'json.dumps(body["messages"], ensure_ascii=False, '
        'separators=(",", ":")) of the body the upstream received, UTF-8',
        "share": "common_prefix(P[t], P[t-1]) / len(P[t])",
        "target": f">= {TARGET:.0%} from turn {TARGET_FROM_TURN} on",
        "builds": {"current": build_source(None)},
    }


def start_fakes(children: Children, tmp: Path, hits: int) -> tuple[str, str]:
    """The recording fake upstream and the fake Gateway, ready: their base URLs."""
    port = free_port()
    gateway = f"http://127.0.0.1:{port}"
    argv = [sys.executable, str(BENCH_DIR / "fake_gateway.py"), "--port", str(port)]
    gw = children.start("fake-gateway", [*argv, "--hits", str(hits)], child_env(), tmp)
    upstream, _ = start_fake_upstream(children, tmp, FAKE_UPSTREAM_RECORD="1")
    wait_ready(f"{gateway}/health", gw, "fake gateway", 30)
    return upstream, gateway


def plan_conversations(args: argparse.Namespace, window: int) -> list[Conversation]:
    conversations = [Conversation("current", "current", window)]
    if args.baseline_src is not None:
        conversations.append(Conversation("old", "old", window))
    if window > DEFAULT_WINDOW:  # the token default slides within this conversation
        conversations.append(Conversation("current-window-20", "current", DEFAULT_WINDOW))
        if args.baseline_src is not None:
            conversations.append(Conversation("old-window-20", "old", DEFAULT_WINDOW))
    if not args.no_reference_first:
        conversations.append(
            Conversation("current-reference-first", "current", DEFAULT_WINDOW, "reference_first")
        )
    return conversations


def start_builds(
    args: argparse.Namespace, children: Children, tmp: Path, upstream: str, meta: dict[str, Any]
) -> dict[str, MemoryBridge]:
    servers = {"current": start_memorybridge(children, tmp, upstream)}
    if args.baseline_src is not None:
        src = args.baseline_src.resolve() / "src"
        servers["old"] = start_memorybridge(children, tmp, upstream, "memorybridge-base", src)
        meta["builds"]["old"] = build_source(src)
    return servers


def drive_all(
    args: argparse.Namespace,
    conversations: list[Conversation],
    servers: dict[str, MemoryBridge],
    upstream: str,
    gateway: str,
) -> list[str]:
    """Every conversation in turn; the problems that make its figures not 'every layer on'."""
    problems: list[str] = []
    for conv in conversations:
        mb = servers[conv.build]
        token = prepare(conv, mb, upstream, gateway)
        settler = Settler(mb, f"{upstream}/bench/stats")
        settler.jobs_api = mb.admin_call("GET", f"/tokens/{conv.token_id}/jobs").is_success
        log(f"{conv.name}: {conv.build} build, window {conv.window}, layers {conv.layers}")
        run_conversation(conv, mb, token, upstream, settler, args.turns, args.reply_bytes)
        problems += check_layers(conv)
    return problems


def run(args: argparse.Namespace, children: Children, tmp: Path, window: int) -> None:
    started = time.monotonic()
    meta = start_meta(args)
    upstream, gateway = start_fakes(children, tmp, args.gateway_hits)
    servers = start_builds(args, children, tmp, upstream, meta)
    conversations = plan_conversations(args, window)
    problems = drive_all(args, conversations, servers, upstream, gateway)
    table = render_table(conversations)
    meta["seconds"] = round(time.monotonic() - started, 1)
    print_report(table, conversations, meta, problems)
    if args.json:
        write_json(args.json, table, conversations, meta, problems)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, terminate)
    tmp = Path(tempfile.mkdtemp(prefix="mb-placement-"))
    (tmp / "logs").mkdir()
    children = Children(tmp / "logs")
    window = min(1000, max(DEFAULT_WINDOW, 2 * args.turns))  # the whole conversation
    log(f"temp dir {tmp}; {args.turns} turns, history window {window} messages")
    try:
        run(args, children, tmp, window)
        return 0
    finally:
        children.stop_all()
        if args.keep_temp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
