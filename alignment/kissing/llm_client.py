"""Chat models for program search: any OpenAI-compatible endpoint over HTTP, or a local model through the
rollout engine. Both answer `chat(messages, sampling)` with the reply text and its token counts.

The HTTP client retries what may pass (connection errors, timeouts, 429 and 5xx) with exponential backoff
(a server's Retry-After is honoured, capped), and fails at once, with the server's message, on other 4xx.
The key is read from an environment variable and never stored in logs.

Thinking models: reasoning comes back apart from the answer (`reasoning_content`, or `reasoning`, beside
`content`, as vLLM's and most providers' reasoning parsers give it; or inline as <think>...</think>, which is
split off). `ChatReply.text` is the answer alone, what a conversation sends back; `reasoning` is for the log.
Extra request fields (`extra_body`: `chat_template_kwargs`, `enable_thinking`, `top_k`, ...) go into every
request body as given.
"""

import json
import os
import random
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from alignment.rollout.interface import RolloutEngine, SamplingConfig

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": ...}
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


@dataclass
class ChatReply:
    text: str  # the answer, reasoning removed
    prompt_tokens: int
    completion_tokens: int  # reasoning included, as endpoints count (and bill) it
    finish_reason: str
    reasoning: str | None = None  # the model's thinking, when it gave any
    reasoning_tokens: int | None = None  # when the endpoint reports it


_THINK = re.compile(r"<think>(.*?)(?:</think>|\Z)\s*", re.DOTALL)


def split_reasoning(content: str) -> tuple[str, str | None]:
    """(answer, reasoning) of a reply that may carry <think>...</think> (an unclosed one runs to the end; a lone
    </think> closes reasoning whose opening tag was in the prompt, as Qwen3's template puts it there)."""
    if "</think>" in content and "<think>" not in content:
        before, _, after = content.partition("</think>")
        return after.strip(), before.strip()
    thoughts = _THINK.findall(content)
    if not thoughts:
        return content, None
    return _THINK.sub("", content).strip(), "\n".join(t.strip() for t in thoughts)


@dataclass
class TokenUsage:
    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0

    def add(self, reply: ChatReply) -> None:
        self.requests += 1
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.reasoning_tokens += reply.reasoning_tokens or 0

    def to_json(self) -> dict[str, int]:
        return asdict(self)


class ChatModel(Protocol):
    usage: TokenUsage

    def chat(self, messages: list[Message], sampling: SamplingConfig) -> ChatReply: ...


class ChatError(RuntimeError):
    """The endpoint refused the request, or kept failing after every retry."""


class OpenAIChatClient:
    """POST {base_url}/chat/completions with the key from `api_key_env` (unset: no Authorization header)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0:
            raise ValueError("timeout_s must be > 0, max_retries and backoff_s >= 0")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._key = os.environ.get(api_key_env)
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._sleep = sleep
        self._jitter = random.Random(0)
        self.extra_body = dict(extra_body or {})
        self.usage = TokenUsage()

    def _request(self, path: str, body: dict | None) -> dict:
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.base_url + path, data=data, headers=headers, method="POST" if body is not None else "GET"
        )
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return json.loads(response.read().decode("utf-8"))

    def _wait(self, attempt: int, retry_after: str | None) -> None:
        delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (1 + 0.1 * self._jitter.random())
        if retry_after and retry_after.replace(".", "", 1).isdigit():
            delay = min(self.max_backoff_s, float(retry_after))
        self.usage.retries += 1
        self._sleep(delay)

    def call(self, path: str, body: dict | None = None) -> dict:
        """One API call with retries; the parsed JSON answer."""
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                return self._request(path, body)
            except urllib.error.HTTPError as err:
                detail = err.read().decode("utf-8", errors="replace")[:500]
                if err.code not in RETRYABLE_STATUS:
                    raise ChatError(f"{self.base_url}{path} answered HTTP {err.code}: {detail}") from None
                last, retry_after = f"HTTP {err.code}: {detail}", err.headers.get("Retry-After")
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                last = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
            except json.JSONDecodeError as err:
                last = f"the answer is not JSON ({err})"
            if attempt < self.max_retries:
                self._wait(attempt, retry_after)
        raise ChatError(f"{self.base_url}{path} failed {self.max_retries + 1} times; last: {last}")

    def models(self) -> list[str]:
        return [entry["id"] for entry in self.call("/models").get("data", [])]

    def chat(self, messages: list[Message], sampling: SamplingConfig) -> ChatReply:
        body = {
            "model": self.model,
            "messages": messages,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
        }
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        answer = self.call("/chat/completions", body | self.extra_body)
        try:
            choice = answer["choices"][0]
            message = choice["message"]
            text, inline = split_reasoning(message.get("content") or "")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ChatError(
                f"{self.base_url} gave a reply without choices[0].message.content: {str(answer)[:300]}"
            ) from None
        usage = answer.get("usage") or {}
        details = usage.get("completion_tokens_details") or {}
        reasoning = message.get("reasoning_content") or message.get("reasoning") or inline
        reply = ChatReply(
            text,
            int(usage.get("prompt_tokens", 0)),
            int(usage.get("completion_tokens", 0)),
            str(choice.get("finish_reason", "")),
            reasoning,
            int(details["reasoning_tokens"]) if details.get("reasoning_tokens") is not None else None,
        )
        self.usage.add(reply)
        return reply


class LocalChatModel:
    """A local model: messages through its tokenizer's chat template, one sample from the rollout engine."""

    def __init__(self, engine: RolloutEngine, tokenizer) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.usage = TokenUsage()

    def prompt_text(self, messages: list[Message]) -> str:
        if not self.tokenizer.chat_template:
            return "\n\n".join(m["content"] for m in messages) + "\n"
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def chat(self, messages: list[Message], sampling: SamplingConfig) -> ChatReply:
        prompt = self.prompt_text(messages)
        rollout = self.engine.generate([prompt], 1, sampling)[0]
        prompt_tokens = len(self.tokenizer(prompt, add_special_tokens=False)["input_ids"])
        text, reasoning = split_reasoning(rollout.text)
        reply = ChatReply(text, prompt_tokens, len(rollout.token_ids), rollout.finish_reason, reasoning)
        self.usage.add(reply)
        return reply
