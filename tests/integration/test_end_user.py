"""A memory turn that names no end user is served from the token-wide memory, which every such
request shares: the response says so in a header, and the log says so once per token."""

from __future__ import annotations

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.support.proxy import Proxy

HEADER = "x-memorybridge-end-user"


def test_a_request_without_an_end_user_is_told_and_logged_once(
    proxy: Proxy, upstream: FakeUpstream, logs: pytest.LogCaptureFixture
) -> None:
    _, token = proxy.create_token()
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    anonymous = [proxy.chat(token, **body) for _ in range(2)]
    assert [r.headers.get(HEADER) for r in anonymous] == ["none (token-wide memory)"] * 2
    named = proxy.chat(token, **body, user="ana")
    by_header = proxy.chat(token, headers={"X-User-Id": "bo"}, **body)
    assert named.headers.get(HEADER) is None and by_header.headers.get(HEADER) is None
    lines = [r.getMessage() for r in logs.records if "names no end user" in r.getMessage()]
    assert len(lines) == 1 and token not in lines[0], lines
    # A passthrough token has no memory to share: nothing to say.
    _, plain = proxy.create_token(memory={"mode": "off"})
    assert proxy.chat(plain, **body).headers.get(HEADER) is None
