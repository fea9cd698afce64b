"""The OpenAI Agents SDK with its default model class (`OpenAIResponsesModel`) and one function
tool, through the real proxy: the agent loop works, every call is a Responses call, the turn's
tool-call chain is stored once, and the next run in the session gets it as history."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
from agents import Agent, RunConfig, Runner, function_tool
from agents.models.openai_provider import OpenAIProvider
from agents.models.openai_responses import OpenAIResponsesModel

from tests.fakes.upstream import FakeUpstream, Scenario, ToolCall
from tests.support.chat_helpers import stored_rows
from tests.support.proxy import Proxy
from tests.support.responses_helpers import MODEL, forwarded, msg

CITY = {"city": "Paris"}


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def run_config(proxy: Proxy, token: str) -> RunConfig:
    client = openai.AsyncOpenAI(
        base_url=f"{proxy.url}/v1",
        api_key=token,
        max_retries=0,
        default_headers={"X-Session-Id": "agent"},
    )
    # The SDK's default provider: Responses models unless told otherwise.
    provider = OpenAIProvider(openai_client=client)
    assert isinstance(provider.get_model(MODEL), OpenAIResponsesModel)
    return RunConfig(model_provider=provider, tracing_disabled=True)


def script(upstream: FakeUpstream, answer: str) -> None:
    upstream.enqueue(
        Scenario(tool_calls=[ToolCall("get_weather", CITY, id="call_p")]),
        Scenario(content=answer),
    )


def stored(proxy: Proxy) -> list[dict[str, Any]]:
    return [body for *_, body in stored_rows(proxy)]


def test_an_agent_with_a_function_tool(proxy: Proxy, upstream: FakeUpstream) -> None:
    _, token = proxy.create_token()
    agent = Agent(name="helper", instructions="You help.", model=MODEL, tools=[get_weather])
    config = run_config(proxy, token)  # its client lives in the loop of `run_sync`

    script(upstream, "It is sunny in Paris.")
    result = Runner.run_sync(agent, "Weather in Paris?", run_config=config)
    assert result.final_output == "It is sunny in Paris."
    assert [r.path for r in upstream.proxied_requests] == []  # no chat completion at all
    first, second = (r.json for r in upstream.responses_requests)
    assert first["instructions"] == second["instructions"] == "You help."
    assert first["tools"][0]["name"] == "get_weather"
    # The agent resends the whole turn; nothing of it is injected again.
    assert [item.get("type", "message") for item in second["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    arguments = json.dumps(CITY, separators=(",", ":"))
    call = {
        "id": "call_p",
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }
    chain = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "sunny in Paris", "tool_call_id": "call_p"},
        {"role": "assistant", "content": "It is sunny in Paris."},
    ]
    assert stored(proxy) == chain

    # A new run in the same session, streamed: the stored chain comes first, as items.
    script(upstream, "Still sunny.")

    async def streamed() -> Any:
        run = Runner.run_streamed(agent, "And now?", run_config=run_config(proxy, token))
        async for _ in run.stream_events():
            pass
        return run.final_output

    assert asyncio.run(streamed()) == "Still sunny."
    history = forwarded(upstream)["input"][:5]
    assert history == [
        msg("user", "Weather in Paris?"),
        {
            "type": "function_call",
            "call_id": "call_p",
            "name": "get_weather",
            "arguments": arguments,
        },
        {"type": "function_call_output", "call_id": "call_p", "output": "sunny in Paris"},
        msg("assistant", "It is sunny in Paris."),
        {"content": "And now?", "role": "user"},
    ]
    assert stored(proxy)[len(chain) :] == [
        {"role": "user", "content": "And now?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "sunny in Paris", "tool_call_id": "call_p"},
        {"role": "assistant", "content": "Still sunny."},
    ]
