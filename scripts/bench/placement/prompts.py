"""The conversation `bench_placement.py` drives: the client's system prompt, the user's turns,
and what the measure looks for in a forwarded prompt."""

from __future__ import annotations

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


def user_text(turn: int) -> str:
    text = USER_TURNS[(turn - 1) % len(USER_TURNS)]
    return text if turn <= len(USER_TURNS) else f"{text} (again, turn {turn})"
