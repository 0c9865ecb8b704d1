"""A small OpenAI-compatible server over any ChatModel (e.g. a local model on the rollout engine):
GET /v1/models and POST /v1/chat/completions, stdlib only. For tests and local runs, not for the internet.

Requests are bounded (body size, max_tokens, messages, a socket timeout per connection) and served one at a
time (the model is not thread-safe); `stop()` shuts the listener down and joins its thread.

    with OpenAIServer(LocalChatModel(engine, tokenizer), "smollm2-135m") as server:
        client = OpenAIChatClient(server.base_url, "smollm2-135m")
"""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from alignment.kissing.llm_client import ChatModel
from alignment.rollout.interface import SamplingConfig


class BadRequest(ValueError):
    pass


def sampling_from_body(body: dict[str, Any], max_tokens_cap: int) -> SamplingConfig:
    """The request's sampling settings, checked; errors name the field."""
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", max_tokens_cap))
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= max_tokens_cap:
        raise BadRequest(f"max_tokens must be an integer in [1, {max_tokens_cap}], got {max_tokens!r}")
    if body.get("n", 1) != 1:
        raise BadRequest(f"n must be 1, got {body.get('n')!r}")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    try:
        return SamplingConfig(
            temperature=float(body.get("temperature", 1.0)),
            top_p=float(body.get("top_p", 1.0)),
            max_tokens=max_tokens,
            stop=stop,
            include_stop_str_in_output=False,
            seed=body.get("seed"),
        )
    except (TypeError, ValueError) as err:
        raise BadRequest(str(err)) from None


def messages_from_body(body: dict[str, Any], max_messages: int) -> list[dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not 1 <= len(messages) <= max_messages:
        raise BadRequest(f"messages must be a list of 1 to {max_messages} messages")
    for i, m in enumerate(messages):
        if not (
            isinstance(m, dict)
            and m.get("role") in ("system", "user", "assistant")
            and isinstance(m.get("content"), str)
        ):
            raise BadRequest(f"messages[{i}] must be {{'role': system|user|assistant, 'content': str}}")
    return [{"role": m["role"], "content": m["content"]} for m in messages]


class ChatHandler(BaseHTTPRequestHandler):
    server: "_Listener"
    timeout = 60  # seconds a client may take to send its request

    def log_message(self, format: str, *args: Any) -> None:  # keep test and script output quiet
        pass

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._send(status, {"error": {"message": message, "type": kind}})

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(
                200,
                {"object": "list", "data": [{"id": self.server.model_name, "object": "model", "owned_by": "local"}]},
            )
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self) -> None:
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._error(404, f"no route {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        if length > self.server.max_body_bytes:
            self.close_connection = True
            return self._error(
                413, f"request body of {length} bytes is over the {self.server.max_body_bytes}-byte limit"
            )
        try:
            body = json.loads(self.rfile.read(length).decode("utf-8"))
            if not isinstance(body, dict):
                raise BadRequest("the body must be a JSON object")
            messages = messages_from_body(body, self.server.max_messages)
            sampling = sampling_from_body(body, self.server.max_tokens_cap)
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            return self._error(400, f"the body is not JSON: {err}")
        except BadRequest as err:
            return self._error(400, str(err))
        with self.server.model_lock:
            try:
                reply = self.server.model.chat(messages, sampling)
            except Exception as err:  # the model failed: a 500 the client may retry, never a dead server
                return self._error(500, f"{type(err).__name__}: {err}", "server_error")
        self._send(
            200,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:16]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.server.model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": reply.text},
                        "finish_reason": reply.finish_reason,
                    }
                ],
                "usage": {
                    "prompt_tokens": reply.prompt_tokens,
                    "completion_tokens": reply.completion_tokens,
                    "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                },
            },
        )


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    model: ChatModel
    model_name: str
    model_lock: threading.Lock
    max_body_bytes: int
    max_tokens_cap: int
    max_messages: int


class OpenAIServer:
    """Serve `model` on host:port (port 0: a free one) in a background thread until stop()."""

    def __init__(
        self,
        model: ChatModel,
        model_name: str,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body_bytes: int = 1_000_000,
        max_tokens_cap: int = 4096,
        max_messages: int = 64,
        handler: type[ChatHandler] = ChatHandler,
    ) -> None:
        self._listener = _Listener((host, port), handler)
        self._listener.model = model
        self._listener.model_name = model_name
        self._listener.model_lock = threading.Lock()
        self._listener.max_body_bytes = max_body_bytes
        self._listener.max_tokens_cap = max_tokens_cap
        self._listener.max_messages = max_messages
        self._thread = threading.Thread(target=self._listener.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._listener.server_address[:2]
        return f"http://{host}:{port}/v1"

    def stop(self, drain_s: float = 60.0) -> None:
        """Stop listening, then wait up to `drain_s` for a reply still being generated (a client that gave up
        waiting leaves one behind; the interpreter must not exit under a running generation)."""
        self._listener.shutdown()
        self._listener.server_close()
        self._thread.join(timeout=10)
        if self._listener.model_lock.acquire(timeout=drain_s):
            self._listener.model_lock.release()

    def __enter__(self) -> "OpenAIServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
