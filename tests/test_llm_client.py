"""The OpenAI-compatible client against the project's own server on 127.0.0.1 (over a tiny model on the
rollout engine): real HTTP, token accounting, bounded requests, retries with backoff, and a clean stop."""

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from alignment.kissing.llm_client import ChatError, LocalChatModel, OpenAIChatClient, split_reasoning
from alignment.kissing.openai_server import ChatHandler, OpenAIServer
from alignment.rollout.hf_engine import HFRolloutEngine
from alignment.rollout.interface import SamplingConfig

SAMPLING = SamplingConfig(temperature=1.0, max_tokens=6, stop=(), seed=0)
MESSAGES = [{"role": "user", "content": "Say hi."}]


@pytest.fixture
def local_chat(tiny_model, tokenizer) -> LocalChatModel:
    return LocalChatModel(HFRolloutEngine(tiny_model, tokenizer), tokenizer)


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_chat_over_http_matches_the_local_model_and_counts_tokens(local_chat):
    with OpenAIServer(local_chat, "tiny", max_tokens_cap=16) as server:
        client = OpenAIChatClient(server.base_url, "tiny", timeout_s=60)
        assert client.models() == ["tiny"]
        reply = client.chat(MESSAGES, SAMPLING)
        second = client.chat(MESSAGES, SAMPLING)
    direct = local_chat.chat(MESSAGES, SAMPLING)  # same seed, same model: the same text
    assert reply.text == second.text == direct.text
    assert reply.prompt_tokens == direct.prompt_tokens > 3 and 1 <= reply.completion_tokens <= 6
    assert reply.finish_reason in ("stop", "length")
    assert (client.usage.requests, client.usage.retries) == (2, 0)
    assert client.usage.prompt_tokens == 2 * reply.prompt_tokens
    assert client.usage.completion_tokens == reply.completion_tokens + second.completion_tokens


def test_server_refuses_unbounded_or_malformed_requests_and_client_does_not_retry_them(local_chat):
    with OpenAIServer(local_chat, "tiny", max_body_bytes=2000, max_tokens_cap=8) as server:
        url = server.base_url + "/chat/completions"
        status, body = post(url, json.dumps({"messages": MESSAGES, "max_tokens": 9}).encode())
        assert status == 400 and "max_tokens must be an integer in [1, 8]" in body["error"]["message"]
        status, body = post(url, json.dumps({"messages": [{"role": "robot", "content": "x"}]}).encode())
        assert status == 400 and "messages[0]" in body["error"]["message"]
        status, body = post(url, b"{not json")
        assert status == 400 and "not JSON" in body["error"]["message"]
        status, body = post(url, json.dumps({"messages": [{"role": "user", "content": "x" * 5000}]}).encode())
        assert status == 413 and "2000-byte limit" in body["error"]["message"]
        sleeps: list[float] = []
        client = OpenAIChatClient(server.base_url, "tiny", sleep=sleeps.append)
        with pytest.raises(ChatError, match="HTTP 400.*max_tokens"):
            client.chat(MESSAGES, SamplingConfig(max_tokens=9, stop=()))
        assert sleeps == [] and client.usage.retries == 0


def fails_twice() -> type[ChatHandler]:
    """A misbehaving server: the first two chat requests get 500 and 503 (with Retry-After), then service."""

    class FailsTwice(ChatHandler):
        failures = [500, 503]

        def do_POST(self) -> None:
            if self.failures:
                status = self.failures.pop(0)
                data = json.dumps({"error": {"message": "overloaded"}}).encode()
                self.send_response(status)
                if status == 503:
                    self.send_header("Retry-After", "0.2")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            super().do_POST()

    return FailsTwice


def test_retries_with_backoff_after_server_errors_within_bounded_time(local_chat):
    with OpenAIServer(local_chat, "tiny", handler=fails_twice()) as server:
        client = OpenAIChatClient(server.base_url, "tiny", max_retries=3, backoff_s=0.05)
        began = time.monotonic()
        reply = client.chat(MESSAGES, SAMPLING)
        took = time.monotonic() - began
    assert reply.completion_tokens >= 1
    assert client.usage.retries == 2 and client.usage.requests == 1
    assert 0.25 <= took < 20  # 0.05 s backoff, then the server's Retry-After of 0.2 s, then the model


def test_gives_up_after_max_retries_on_a_dead_endpoint():
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sleeps: list[float] = []
    client = OpenAIChatClient(
        f"http://127.0.0.1:{port}/v1", "m", max_retries=3, backoff_s=1.0, max_backoff_s=3.0, sleep=sleeps.append
    )
    with pytest.raises(ChatError, match="failed 4 times; last: URLError"):
        client.chat(MESSAGES, SAMPLING)
    assert len(sleeps) == 3 and sleeps[0] < sleeps[1] < sleeps[2] <= 3.3  # exponential, capped (10% jitter)


def test_key_comes_from_the_environment_and_bad_urls_are_refused(monkeypatch, local_chat):
    seen: list[str | None] = []

    class Records(ChatHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Authorization"))
            super().do_GET()

    monkeypatch.setenv("KISSING_TEST_KEY", "sk-test-1")
    with OpenAIServer(local_chat, "tiny", handler=Records) as server:
        OpenAIChatClient(server.base_url, "tiny", api_key_env="KISSING_TEST_KEY").models()
        OpenAIChatClient(server.base_url, "tiny", api_key_env="KISSING_UNSET_KEY").models()
    assert seen == ["Bearer sk-test-1", None]
    with pytest.raises(ValueError, match="base_url must start with http"):
        OpenAIChatClient("localhost:8000", "m")


def test_stop_closes_the_port(local_chat):
    server = OpenAIServer(local_chat, "tiny")
    url = server.base_url
    server.stop()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url + "/models", timeout=5)


def test_reasoning_is_split_from_the_answer_in_every_form_thinking_models_give():
    assert split_reasoning("<think>a\nb</think>\n\nanswer") == ("answer", "a\nb")
    assert split_reasoning("reasoning whose tag was in the prompt</think>answer") == (
        "answer",
        "reasoning whose tag was in the prompt",
    )
    assert split_reasoning("<think>cut off before the end") == ("", "cut off before the end")
    assert split_reasoning("plain answer") == ("plain answer", None)
