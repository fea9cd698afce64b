"""Prompt-prefix stability of what MemoryBridge forwards, turn by turn (issue 15, placement).

    python scripts/bench_placement.py                                  # current build, 20 turns
    python scripts/bench_placement.py --baseline-src /tmp/base --json .bench/placement.json
    python scripts/bench_placement.py --quick                          # 6 turns, smoke run
    python scripts/bench_placement.py --no-reference-first             # skip that layout

Providers cache a prompt by exact prefix, so what matters turn after turn is how much of the
forwarded prompt starts exactly like the previous turn's. One conversation with every memory
layer on (curated MEMORY.md + USER.md, session history, long-term memory through Mem0 with the
fake upstream's extraction LLM and embedder, a Memory Gateway whose hits change every turn) is
driven through MemoryBridge; a recording fake upstream hands back each forwarded body.

The measure, per turn t >= 2: the share of turn t's forwarded prompt that equals turn t-1's
prefix, `common_prefix(P[t], P[t-1]) / len(P[t])`, where P is the `messages` array of the JSON
body the upstream received, parsed and serialized again as compact UTF-8 JSON
(`json.dumps(messages, ensure_ascii=False, separators=(",", ":"))`, keys in received order):
the whole chat prompt, with the body's other fields and its whitespace left out. The share of
the raw body's bytes is kept in the JSON too (`body_share`) as a cross-check.

Conversations: `current` (a history window holding the whole conversation), `current-window-20`
(the token default of 20 messages, which slides within 20 turns) and
`current-reference-first` (window 20, `memory.placement: "reference_first"`). With
`--baseline-src DIR` a second MemoryBridge runs the build under DIR/src (e.g. a `git worktree`
of the commit before a change) through the same conversation, side by side: `old` and
`old-window-20`.
Processes, ports and environment come from `bench_proxy.py`. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from bench_proxy import (
    BENCH_DIR,
    CURATED_MEMORY,
    CURATED_USER,
    UPSTREAM_KEY,
    Children,
    MemoryBridge,
    _terminate,
    child_env,
    free_port,
    log,
    start_memorybridge,
    wait_ready,
)

TARGET = 0.90  # issue 15: at least 90% of the prompt is the previous turn's prefix ...
TARGET_FROM_TURN = 5  # ... from turn 5 on
DEFAULT_WINDOW = 20  # the token default of `session_window_size`
SESSION = "placement-bench"
END_USER = "ada"
MEMORY_MARK = "## Memories about this user"  # first line of templates/memory_template.md
GATEWAY_MARK = "[Memory Gateway recall"  # the label of the Gateway reference block

CLIENT_SYSTEM = (
    "You are Atlas, the engineering assistant of the data platform team. You help engineers "
    "plan, review and debug changes to the team's pipelines, services and dashboards.\n\n"
    "Guidelines:\n"
    "- Answer the question that was asked first, then add context only when it changes the "
    "decision. Prefer short paragraphs and bullet lists over long prose.\n"
    "- When you propose a change, say what could break, how to test it before it ships, and "
    "how to roll it back. Name the owning team when the change crosses a boundary.\n"
    "- Use the team's conventions: Python 3.11 with type hints, SQL formatted with leading "
    "commas, ISO 8601 dates, UTC timestamps, metric units.\n"
    "- If a request is ambiguous, state the assumption you make and go on; ask a question only "
    "when a wrong guess would be expensive.\n"
    "- Never invent the output of a command, a metric or a ticket number. Say what you would "
    "run to find out instead.\n"
    "- Code samples must be complete enough to run, with imports, and no longer than needed.\n"
    "- Keep secrets out of answers: refer to credentials by the name of the vault entry, never "
    "by value.\n\n"
    "Today the team is migrating its nightly batch jobs to an event-driven design; questions "
    "about that migration take priority."
)

USER_TURNS = (
    "We want to move the nightly ingestion job to the event queue. Where would you start?",
    "The job reads about 40 million rows from the orders table. Can the queue consumer keep up "
    "if we process events one at a time?",
    "How should we batch the writes to the warehouse without losing ordering per customer?",
    "What happens to events that arrive while the consumer is being deployed?",
    "Draft the retry policy for a consumer that calls the payments API, which sometimes times "
    "out for a minute or two.",
    "We also need to backfill two years of history. Should the backfill go through the same queue?",
    "How do we check that the new pipeline produces the same totals as the old nightly job?",
    "Write a SQL query that compares daily order totals between the two output tables.",
    "The comparison shows a 0.3% difference on days with daylight-saving changes. Why?",
    "How do we fix the timezone handling without reprocessing everything?",
    "What metrics should the consumer export so the on-call engineer can tell it is healthy?",
    "Suggest alert thresholds for consumer lag, given that we publish about 900 events per "
    "second at peak.",
    "The schema of the order event will gain a currency field next month. How do we roll that "
    "out safely?",
    "Write the Python dataclass for the order event, including the new optional field.",
    "How do we test the consumer against malformed events without polluting staging?",
    "Could we run the old nightly job and the new consumer side by side for a week? What would "
    "that cost?",
    "What is the rollback plan if the consumer corrupts a day of data?",
    "Summarise the migration plan as a checklist for the change review.",
    "Which parts of the checklist need sign-off from the billing team?",
    "Thanks. Anything we forgot before we book the change window?",
)


# -------------------------------------------------------------------------------------------
# Measuring one prompt against the previous one


def encode(value: Any) -> bytes:
    """The serialization the shares are measured on (see the module docstring)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def common_prefix(a: bytes, b: bytes) -> int:
    """Length of the longest common byte prefix of `a` and `b`."""
    limit = min(len(a), len(b))
    step = 4096
    i = 0
    while i < limit and a[i : i + step] == b[i : i + step]:  # whole blocks first
        i += step
    i = min(i, limit)
    while i < limit and a[i] == b[i]:
        i += 1
    return i


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def kind(messages: list[dict[str, Any]], index: int) -> str:
    """What a forwarded message is: system prompt, history, recall block or latest user."""
    message = messages[index]
    if index == len(messages) - 1:
        return "latest user message"
    if message.get("role") in ("system", "developer"):
        return "system prompt"
    text = text_of(message)
    if message.get("role") == "user" and (MEMORY_MARK in text or GATEWAY_MARK in text):
        return "recall block"
    return "history"


def message_at(messages: list[dict[str, Any]], offset: int) -> int | None:
    """Index of the message whose bytes hold `offset` in `encode(messages)`; None past the end."""
    position = 1  # "["
    for index, message in enumerate(messages):
        position += len(encode(message)) + 1  # the message and its "," (or the closing "]")
        if offset < position:
            return index
    return None


def measure(
    messages: list[dict[str, Any]],
    body: bytes,
    previous: tuple[list[dict[str, Any]], bytes] | None,
) -> dict[str, Any]:
    """The figures of one turn's forwarded prompt against the previous turn's."""
    prompt = encode(messages)
    figures: dict[str, Any] = {
        "messages": len(messages),
        "bytes": len(prompt),
        "kinds": dict(Counter(kind(messages, i) for i in range(len(messages)))),
        "recall_block_bytes": sum(
            len(encode(m)) for i, m in enumerate(messages) if kind(messages, i) == "recall block"
        ),
    }
    if previous is None:
        return figures | {"prefix_bytes": None, "share": None, "breaks_in": None}
    before, before_body = previous
    prefix = common_prefix(prompt, encode(before))
    index = message_at(messages, prefix)
    seen = Counter(encode(m) for m in before)
    carried = 0
    for message in messages:
        data = encode(message)
        if seen[data] > 0:
            seen[data] -= 1
            carried += len(data)
    return figures | {
        "prefix_bytes": prefix,
        "share": round(prefix / len(prompt), 4),
        "breaks_in": None if index is None else f"{kind(messages, index)} (#{index})",
        "carried_share": round(carried / len(prompt), 4),
        "body_bytes": len(body),
        "body_share": round(common_prefix(body, before_body) / len(body), 4),
    }


def summary(turns: list[dict[str, Any]]) -> dict[str, Any]:
    late = [t["share"] for t in turns if t["turn"] >= TARGET_FROM_TURN and t["share"] is not None]
    if not late:
        return {"from_turn": TARGET_FROM_TURN, "min": None, "median": None, "target_met": None}
    return {
        "from_turn": TARGET_FROM_TURN,
        "min": min(late),
        "median": round(statistics.median(late), 4),
        "target": TARGET,
        "target_met": min(late) >= TARGET,
    }


# -------------------------------------------------------------------------------------------
# Driving a conversation


@dataclass
class Conversation:
    name: str
    build: str  # which MemoryBridge serves it: "current" or "old"
    window: int  # the token's session_window_size
    placement: str = "stable"  # the token's memory.placement
    turns: list[dict[str, Any]] = field(default_factory=list)
    token_id: int = 0
    layers: dict[str, Any] = field(default_factory=dict)


def token_config(
    name: str, upstream: str, gateway: str, window: int, placement: str = "stable"
) -> dict[str, Any]:
    """Every layer on: curated (documents put after), history, Gateway, long-term (Mem0)."""
    memory: dict[str, Any] = {
        "mode": "hybrid",
        "gateway": {"baseUrl": gateway, "userId": "bench-user", "userKey": "uk-bench-key"},
    }
    if placement != "stable":  # an older build knows no placement option
        memory["placement"] = placement
    return {
        "name": name,
        "llm_base_url": upstream,
        "llm_api_key": UPSTREAM_KEY,
        "session_window_size": window,
        "memory": memory,
        "memory_llm_provider": "openai",
        "memory_llm_base_url": f"{upstream}/v1",
        "memory_llm_api_key": UPSTREAM_KEY,
        "memory_llm_body": {"model": "bench-mem0"},
        "embed_provider": "openai",
        "embed_base_url": f"{upstream}/v1",
        "embed_api_key": UPSTREAM_KEY,
        "embed_dims": 64,
        "embed_body": {"model": "bench-embed-bow"},  # related texts rank first
    }


def user_text(turn: int) -> str:
    text = USER_TURNS[(turn - 1) % len(USER_TURNS)]
    return text if turn <= len(USER_TURNS) else f"{text} (again, turn {turn})"


def injected(header: str | None) -> dict[str, str]:
    """`curated=1, history=6, gateway=2, longterm=3` as a dict."""
    parts = (p.strip().split("=", 1) for p in (header or "").split(",") if "=" in p)
    return {k: v for k, v in parts}


@dataclass
class Settler:
    """Waits, after a turn, until its after-turn work (Mem0's extraction and writes, queued
    jobs) is done, so the next turn recalls what this one stored, in every build alike."""

    mb: MemoryBridge
    stats_url: str
    jobs_api: bool = False

    def stats(self) -> dict[str, int]:
        data: dict[str, int] = httpx.get(self.stats_url, timeout=10, trust_env=False).json()
        return data

    def open_jobs(self, token_id: int) -> bool:
        if not self.jobs_api:
            return False
        reply = self.mb.admin_call("GET", f"/tokens/{token_id}/jobs")
        return reply.status_code == 200 and reply.json()["oldest_pending_age_seconds"] is not None

    def wait(self, token_id: int, mem0_before: int, limit: float = 120.0) -> float:
        started = time.monotonic()
        deadline = started + limit
        # The turn's extraction call (within 5 s: a turn may give Mem0 nothing to extract).
        while time.monotonic() < min(deadline, started + 5) and self.stats()["mem0"] <= mem0_before:
            time.sleep(0.05)
        while time.monotonic() < deadline and self.open_jobs(token_id):
            time.sleep(0.05)
        # Then 0.3 s without a call to the embedder or the extraction LLM.
        last, since = self.stats(), time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - since < 0.3:
            time.sleep(0.05)
            now = self.stats()
            if (now["embeddings"], now["mem0"]) != (last["embeddings"], last["mem0"]):
                last, since = now, time.monotonic()
        return time.monotonic() - started


def run_conversation(
    conv: Conversation,
    mb: MemoryBridge,
    token: str,
    upstream: str,
    settler: Settler,
    turns: int,
    reply_bytes: int,
) -> None:
    model = f"bench-placement-{conv.name}-reply-{reply_bytes}"
    headers = {"Authorization": f"Bearer {token}", "X-Session-Id": SESSION}
    previous: tuple[list[dict[str, Any]], bytes] | None = None
    with httpx.Client(base_url=mb.url, headers=headers, timeout=120, trust_env=False) as client:
        for turn in range(1, turns + 1):
            mem0_before = settler.stats()["mem0"]
            reply = client.post(
                "/v1/chat/completions",
                json={
                    "model": model,
                    "user": END_USER,
                    "messages": [
                        {"role": "system", "content": CLIENT_SYSTEM},
                        {"role": "user", "content": user_text(turn)},
                    ],
                },
            )
            if reply.status_code != 200:
                raise RuntimeError(f"{conv.name} turn {turn}: {reply.status_code} {reply.text}")
            layers = injected(reply.headers.get("x-memorybridge-injected"))
            forwarded = httpx.get(
                f"{upstream}/_last", params={"model": model}, timeout=10, trust_env=False
            )
            forwarded.raise_for_status()
            body = forwarded.content
            messages: list[dict[str, Any]] = json.loads(body)["messages"]
            record: dict[str, Any] = {"turn": turn, "injected": layers}
            record |= measure(messages, body, previous)
            record["settle_s"] = round(settler.wait(conv.token_id, mem0_before), 2)
            conv.turns.append(record)
            previous = (messages, body)
            share = "—" if record["share"] is None else f"{100 * record['share']:.1f}%"
            log(
                f"{conv.name} turn {turn}: {record['bytes']} bytes, share {share}, "
                f"breaks in {record['breaks_in']}, injected {layers}"
            )


def prepare(conv: Conversation, mb: MemoryBridge, upstream: str, gateway: str) -> str:
    """The conversation's token (every layer on, curated documents put); its token secret."""
    created = mb.create_token(
        token_config(f"bench-placement-{conv.name}", upstream, gateway, conv.window, conv.placement)
    )
    conv.token_id = created["id"]
    conv.layers = created.get("memory_layers") or {}
    mb.put_curated(conv.token_id, "memory", CURATED_MEMORY)
    mb.put_curated(conv.token_id, "user", CURATED_USER)
    token: str = created["token"]
    return token


def check_layers(conv: Conversation) -> list[str]:
    """Problems that would make a conversation's figures not 'every layer on'."""
    problems = []
    for name in ("curated", "gateway"):
        missing = [t["turn"] for t in conv.turns if t["injected"].get(name, "0") in ("0", "error")]
        if missing:
            problems.append(f"{conv.name}: no {name} injected on turns {missing}")
    if conv.turns and not any(t["injected"].get("longterm", "0") != "0" for t in conv.turns[1:]):
        problems.append(f"{conv.name}: no long-term memory injected on any turn")
    for t in conv.turns:
        # The whole window, or (a window that slides in steps) at least its newer half.
        most = min(2 * (t["turn"] - 1), conv.window)
        least = min(most, conv.window // 2)
        if not least <= int(t["injected"].get("history", "0")) <= most:
            problems.append(
                f"{conv.name} turn {t['turn']}: history {t['injected'].get('history')}, "
                f"expected {least}..{most}"
            )
    return problems


# -------------------------------------------------------------------------------------------
# Report


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def render_table(conversations: list[Conversation]) -> str:
    by_name = {c.name: c for c in conversations}
    current = by_name["current"]
    columns = [
        "current",
        "old",
        "current-window-20",
        "old-window-20",
        "current-reference-first",
    ]
    present = [c for c in columns if c in by_name]
    head = ["turn", "prompt bytes (current)", *present, "ceiling (current)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for i, turn in enumerate(current.turns):
        cells = [str(turn["turn"]), str(turn["bytes"])]
        for name in present:
            record = by_name[name].turns[i] if i < len(by_name[name].turns) else {}
            cells.append(pct(record.get("share")))
        cells.append(pct(turn.get("carried_share")))
        lines.append("| " + " | ".join(cells) + " |")
    for label, key in ((f"min from turn {TARGET_FROM_TURN}", "min"), ("median", "median")):
        cells = [f"**{label}**", ""]
        cells += [f"**{pct(summary(by_name[n].turns)[key])}**" for n in present]
        late = [t["carried_share"] for t in current.turns if t["turn"] >= TARGET_FROM_TURN]
        value = (min(late) if key == "min" else statistics.median(late)) if late else None
        lines.append("| " + " | ".join([*cells, pct(value)]) + " |")
    return "\n".join(lines)


def build_source(src: Path | None) -> dict[str, Any]:
    """Where a build's code comes from, and its commit (with `+dirty` if src/ has changes)."""
    if src is None:
        spec = importlib.util.find_spec("memory_bridge")
        origin = spec.origin if spec is not None else None
        if origin is None:
            return {"src": None, "commit": None}
        src = Path(origin).parent.parent
    info: dict[str, Any] = {"src": str(src), "commit": None}
    git = shutil.which("git")
    if git is not None:
        rev = subprocess.run(  # noqa: S603 — our own argv
            [git, "-C", str(src), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        if rev.returncode == 0:
            dirty = subprocess.run(  # noqa: S603 — our own argv
                [git, "-C", str(src), "status", "--porcelain", "--", "."],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
            info["commit"] = rev.stdout.strip() + ("+dirty" if dirty else "")
    return info


# -------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
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


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="mb-placement-"))
    (tmp / "logs").mkdir()
    children = Children(tmp / "logs")
    window = min(1000, max(DEFAULT_WINDOW, 2 * args.turns))  # the whole conversation
    meta: dict[str, Any] = {
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
    log(f"temp dir {tmp}; {args.turns} turns, history window {window} messages")
    try:
        up_port, gw_port = free_port(), free_port()
        upstream, gateway = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{gw_port}"
        fake = children.start(
            "fake-upstream",
            [sys.executable, str(BENCH_DIR / "fake_upstream.py"), "--port", str(up_port)],
            child_env(FAKE_UPSTREAM_RECORD="1"),
            tmp,
        )
        gw = children.start(
            "fake-gateway",
            [
                sys.executable,
                str(BENCH_DIR / "fake_gateway.py"),
                "--port",
                str(gw_port),
                "--hits",
                str(args.gateway_hits),
            ],
            child_env(),
            tmp,
        )
        wait_ready(f"{upstream}/health", fake, "fake upstream", 30)
        wait_ready(f"{gateway}/health", gw, "fake gateway", 30)

        servers = {"current": start_memorybridge(children, tmp, upstream)}
        conversations = [Conversation("current", "current", window)]
        if args.baseline_src is not None:
            src = args.baseline_src.resolve() / "src"
            servers["old"] = start_memorybridge(children, tmp, upstream, "memorybridge-base", src)
            conversations.append(Conversation("old", "old", window))
            meta["builds"]["old"] = build_source(src)
        if window > DEFAULT_WINDOW:  # the token default slides within this conversation
            conversations.append(Conversation("current-window-20", "current", DEFAULT_WINDOW))
            if args.baseline_src is not None:
                conversations.append(Conversation("old-window-20", "old", DEFAULT_WINDOW))
        if not args.no_reference_first:
            conversations.append(
                Conversation(
                    "current-reference-first", "current", DEFAULT_WINDOW, "reference_first"
                )
            )

        problems: list[str] = []
        for conv in conversations:
            mb = servers[conv.build]
            token = prepare(conv, mb, upstream, gateway)
            settler = Settler(mb, f"{upstream}/bench/stats")
            settler.jobs_api = mb.admin_call("GET", f"/tokens/{conv.token_id}/jobs").is_success
            log(f"{conv.name}: {conv.build} build, window {conv.window}, layers {conv.layers}")
            run_conversation(conv, mb, token, upstream, settler, args.turns, args.reply_bytes)
            problems += check_layers(conv)

        table = render_table(conversations)
        meta["seconds"] = round(time.monotonic() - started, 1)
        print(table)
        for conv in conversations:
            s = summary(conv.turns)
            verdict = {True: "met", False: "not met", None: "n/a"}[s["target_met"]]
            print(
                f"- {conv.name} ({conv.build} build {meta['builds'][conv.build]['commit']}, "
                f"history window {conv.window}, placement {conv.placement}): "
                f"from turn {TARGET_FROM_TURN} min "
                f"{pct(s['min'])}, median {pct(s['median'])}; target ≥ {TARGET:.0%} {verdict}"
            )
        print(
            f"- share = longest common byte prefix with the previous turn's prompt / this "
            f"prompt's bytes, on {meta['serialization']}; ceiling = bytes of messages already "
            f"sent byte-identical in the previous turn's prompt"
        )
        print(
            f"- client system prompt {meta['client_system_prompt_bytes']} B, curated "
            f"{len(CURATED_MEMORY)} + {len(CURATED_USER)} B, replies {args.reply_bytes} B, "
            f"{args.gateway_hits} Gateway hits per turn, {meta['seconds']:.0f} s in all"
        )
        for problem in problems:
            print(f"- warning: {problem}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            payload = {
                "meta": meta,
                "conversations": {
                    c.name: {
                        "build": c.build,
                        "window": c.window,
                        "placement": c.placement,
                        "layers": c.layers,
                        "summary": summary(c.turns),
                        "turns": c.turns,
                    }
                    for c in conversations
                },
                "problems": problems,
                "table": table,
            }
            args.json.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
            log(f"figures written to {args.json}")
        return 0
    finally:
        children.stop_all()
        if args.keep_temp:
            log(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
