"""The sim engine as an OpenAI-compatible server: the API on top of the scheduler.

``EngineLoop`` runs the ``Scheduler`` against the wall clock. Simulated time maps to wall
time from the server's start (``perf_counter_ns``): a step planned at simulated time ``s``
with duration ``d`` has its tokens written to the clients' sockets at wall time
``t0 + s + d``. The loop never sleeps a step's length; it sleeps until the step's end on
the clock, so latency a client sees is the model's, plus the server's own lateness.

Lateness is measured on every token write (write time - scheduled time), kept as a
histogram, max and last value in ``/metrics`` and logged as a warning when a step's
writes end more than ``lag_warn_s`` behind schedule. When the server is so far behind
(``resync_s``) that catching up would only burst old tokens, it moves its simulated clock
to now and counts a resync: the simulated engine gets slower, which the metrics show.

The loop never spins: a step that schedules nothing while requests wait
(``SchedulerStalled``, a broken invariant: such requests are refused when they arrive) is
logged as an error and the stuck request fails (an error event in its stream, or a 500)
instead of blocking the queue with empty 0-s steps.

The API follows vLLM's OpenAI server: ``/v1/chat/completions`` and ``/v1/completions``
(streamed as server-sent events, ``stream_options.include_usage`` with usage in a final
chunk, ``continuous_usage_stats`` too), ``/v1/models``, ``/health``, ``/metrics``,
``/version``, its dev-mode ``POST /reset_prefix_cache`` (the prefix cache emptied between
load levels), and its errors: ``{"error": {"message", "type", "param", "code"}}`` with
404 for an unknown model and 400 for bad bodies and over-long requests.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from http import HTTPStatus
from time import perf_counter_ns
from typing import IO, Any

from . import admin, admintoken, faults
from .cluster import Advance
from .httpd import HttpConnection, HttpRequest, HttpServer
from .latencies import RequestLatencies
from .lateness import LatenessStats
from .metrics_exposition import metrics_text
from .profiles import Profile
from .quality import Answer, Answerer
from .scheduler import SimRequest
from .tokens import (
    block_hashes,
    chat_tokens,
    completion_tokens,
    output_piece,
    output_piece_json,
)

log = logging.getLogger("pytest_llmslo.sim")

SIM_VERSION = "0.1.0"
DEFAULT_COMPLETION_MAX_TOKENS = 16  # vLLM's (and the legacy OpenAI API's) default
_ROLE_CHOICE = (
    b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
)
_FINE_SLEEP_S = 1.2e-3


class ApiError(Exception):
    """An error answered as vLLM answers it."""

    def __init__(
        self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.status,
            }
        }


class TraceWriter:
    """JSON lines, one per token written to a client: ``{"rid", "i", "t_ns", "sched_ns"}``
    (``t_ns`` is ``perf_counter_ns()`` just before the write, ``sched_ns`` when the
    model said the token exists). Flushed after every step so readers see whole steps."""

    def __init__(self, path: str) -> None:
        self._f: IO[str] = open(path, "a", buffering=1 << 16, encoding="utf-8")

    def token(self, rid: str, index: int, t_ns: int, sched_ns: int) -> None:
        self._f.write(f'{{"rid":"{rid}","i":{index},"t_ns":{t_ns},"sched_ns":{sched_ns}}}\n')

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class Stream:
    """One request's output: SSE chunks written to its connection as tokens are emitted,
    or collected for a single JSON response."""

    def __init__(
        self,
        conn: HttpConnection,
        req: SimRequest,
        *,
        chat: bool,
        model: str,
        stream: bool,
        include_usage: bool,
        continuous_usage: bool,
        seed: int,
        answer: tuple[Answerer, Answer] | None = None,
    ) -> None:
        self.conn = conn
        #: An eval item's answer, said as the first output token (``quality.py``).
        self.answer = answer
        self.req = req
        self.chat = chat
        self.model = model
        self.stream = stream
        self.include_usage = include_usage
        self.continuous_usage = continuous_usage
        self.seed = seed
        self.created = int(time.time())
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pieces: list[str] = []
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = (
            f'{{"id":"{req.rid}","object":"{obj}","created":{self.created},'
            f'"model":{json.dumps(model)},"choices":'
        )
        self._head = head.encode()
        # The bytes around a token's JSON string, built once per request: the hot path
        # (every token of every stream) only joins three byte strings.
        pre = b"data: " + self._head
        if chat:
            self._pre = pre + b'[{"index":0,"delta":{"content":'
            self._post = b'},"logprobs":null,"finish_reason":null}]'
            self._post_last = b'},"logprobs":null,"finish_reason":"length"}]'
        else:
            self._pre = pre + b'[{"index":0,"text":'
            self._post = b',"logprobs":null,"finish_reason":null,"stop_reason":null}]'
            self._post_last = b',"logprobs":null,"finish_reason":"length","stop_reason":null}]'

    def _usage(self, completion: int) -> str:
        p = self.req.prompt_tokens
        return (
            f'{{"prompt_tokens":{p},"total_tokens":{p + completion},'
            f'"completion_tokens":{completion}}}'
        )

    def emit(self, index: int, last: bool) -> bool:
        """Write output token ``index``; False when the client is gone."""
        said = None
        if index == 0 and self.answer is not None:
            said = self.answer[0].say(self.answer[1], self.req)
        if not self.stream:
            self.pieces.append(output_piece(self.seed, index) if said is None else said)
            if last:
                self._finish_full()
            return True
        piece = output_piece_json(self.seed, index) if said is None else json.dumps(said).encode()
        parts = [self._pre, piece]
        parts.append(self._post_last if last else self._post)
        if self.continuous_usage:
            parts.append(b',"usage":' + self._usage(index + 1).encode())
        parts.append(b"}\n\n")
        if index == 0 and self.chat:
            parts.insert(0, b"data: " + self._head + _ROLE_CHOICE + b"}\n\n")
        if last:
            if self.include_usage:
                parts.append(b"data: " + self._head + b'[],"usage":')
                parts.append(self._usage(index + 1).encode() + b"}\n\n")
            parts.append(b"data: [DONE]\n\n")
        ok = self.conn.write_chunk(b"".join(parts))
        if last and ok:
            self.conn.end_stream()
        if last and not self.done.done():
            self.done.set_result(None)
        return ok

    def _finish_full(self) -> None:
        text = "".join(self.pieces)
        n = len(self.pieces)
        usage = json.loads(self._usage(n))
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": "length",
                "stop_reason": None,
            }
            obj = "text_completion"
        self.conn.send_json(
            200,
            {
                "id": self.req.rid,
                "object": obj,
                "created": self.created,
                "model": self.model,
                "choices": [choice],
                "usage": usage,
            },
        )
        if not self.done.done():
            self.done.set_result(None)

    def fail(self, message: str) -> None:
        """End the request with a server error: an error event then ``[DONE]`` in a stream
        (its 200 head is already out), else a 500 response."""
        if self.done.done():
            return
        err = ApiError(HTTPStatus.INTERNAL_SERVER_ERROR, message, "InternalServerError")
        if self.stream:
            body = json.dumps(err.body(), separators=(",", ":")).encode()
            if self.conn.write_chunk(b"data: " + body + b"\n\ndata: [DONE]\n\n"):
                self.conn.end_stream()
        else:
            self.conn.send_json(err.status, err.body())
        self.done.set_result(None)

    def cancel(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


class EngineLoop:
    """The scheduler on the wall clock (see the module docstring)."""

    def __init__(
        self,
        profile: Profile,
        *,
        trace: TraceWriter | None = None,
        lag_warn_s: float = 0.02,
        resync_s: float = 1.0,
    ) -> None:
        self.profile = profile
        self.cluster = profile.cluster()
        self.trace = trace
        self.lag_warn_s = lag_warn_s
        self.resync_s = resync_s
        self.t0_ns = perf_counter_ns()
        self.sim_now = 0.0
        self.lateness = LatenessStats()
        self.streams: dict[SimRequest, Stream] = {}
        # The engine-side latencies of finished requests, on the simulated clock (vLLM's
        # histograms: queue time, TTFT, ITL, E2E).
        self.latency = RequestLatencies()
        self._wake = asyncio.Event()
        self._last_warn = 0.0
        self._late_since_warn = 0
        self._up_logged = 0  # replicas added while running whose coming up is logged

    def wall_sim(self) -> float:
        """Now, on the simulated clock."""
        return (perf_counter_ns() - self.t0_ns) / 1e9

    def wake(self) -> None:
        """Look at the cluster's next event again (capacity was added)."""
        self._wake.set()

    def submit(self, stream: Stream) -> None:
        req = stream.req
        # Arrivals between events join at the current simulated time (the cluster starts
        # an idle instance's step there).
        self.cluster.submit(req, max(self.sim_now, self.wall_sim()))
        self.streams[req] = stream
        self._wake.set()

    def abort(self, req: SimRequest) -> None:
        self.latency.forget(req)
        stream = self.streams.pop(req, None)
        self.cluster.abort(req)
        if stream is not None:
            stream.cancel()

    def _failed(self, req: SimRequest, why: str) -> None:
        """A request that can never be scheduled: fail it, so the loop moves on rather
        than spinning on empty steps with the whole queue blocked behind it."""
        log.error("sim engine invariant broken: %s; failing it", why)
        stream = self.streams.pop(req, None)
        if stream is not None:
            stream.fail(f"the sim engine cannot schedule this request: {why}")

    async def run(self) -> None:
        cluster = self.cluster
        while True:
            t = cluster.next_event_s()
            if t is None:
                self._wake.clear()
                await self._wake.wait()
                # Idle time passes on the simulated clock too.
                self.sim_now = max(self.sim_now, self.wall_sim())
                continue
            t = max(t, self.sim_now)
            target_ns = self.t0_ns + round(t * 1e9)
            self._wake.clear()
            await self._sleep_until(target_ns)
            result = cluster.advance(t)
            self.sim_now = t
            if len(cluster.replicas_up) > self._up_logged:
                self._up_logged = admin.log_replicas_up(self, self._up_logged)
            self._emit(result)
            behind = (perf_counter_ns() - target_ns) / 1e9
            self.lateness.behind = behind > self.lag_warn_s
            if behind > self.lag_warn_s:
                self._warn(behind)
            if behind > self.resync_s:
                self.sim_now = self.wall_sim()
                self.lateness.resyncs += 1
                log.warning(
                    "sim engine %.3f s behind its schedule: simulated clock moved to now", behind
                )

    async def _sleep_until(self, target_ns: int) -> None:
        """Sleep until ``target_ns`` on ``perf_counter_ns``, usually within 0.2 ms.

        asyncio's timers round up to whole milliseconds (epoll), so the loop sleeps to
        about a millisecond before the target and the rest in ``time.sleep``, which
        blocks the loop for under ~1.5 ms but costs no CPU (no spinning on a shared host).
        """
        delay = (target_ns - perf_counter_ns()) / 1e9
        if delay > _FINE_SLEEP_S:
            await asyncio.sleep(delay - _FINE_SLEEP_S)
        else:
            # Always yield, so arrivals are read even when the loop is behind.
            await asyncio.sleep(0)
        rest = (target_ns - perf_counter_ns()) / 1e9
        if 0 < rest <= 2 * _FINE_SLEEP_S:
            time.sleep(rest)

    def _emit(self, result: Advance) -> None:
        for req, why in result.failed:
            self._failed(req, why)
        for req, why in result.lost:
            faults.lose(self, req, why, abrupt=False)
        trace = self.trace
        stats = self.lateness
        warn = self.lag_warn_s
        for e in result.emitted:
            stream = self.streams.get(e.req)
            if stream is None:
                continue
            # Taken just before the write: a reader on another core can see the bytes
            # before a timestamp taken after the write returns.
            t = perf_counter_ns()
            due = self.t0_ns + round(e.at_s * 1e9)
            ok = stream.emit(e.index, e.last)
            req = e.req
            self.latency.emitted(req, e.index, e.at_s, e.last, req.arrival_s, req.first_scheduled_s)
            stats.add((t - due) / 1e9, warn)
            if trace is not None and ok:
                trace.token(e.req.rid, e.index, t, due)
            if e.last:
                self.streams.pop(e.req, None)
            elif not ok:
                self.abort(e.req)
        if trace is not None and result.emitted:
            trace.flush()

    def _warn(self, behind: float) -> None:
        self._late_since_warn += 1
        now = time.monotonic()
        if now - self._last_warn >= 5.0:
            log.warning(
                "sim engine behind schedule: %.1f ms late at a step end (%d late steps since "
                "the last warning); the host CPU is too busy for honest timing",
                behind * 1e3,
                self._late_since_warn,
            )
            self._last_warn = now
            self._late_since_warn = 0


def _int_field(body: Mapping[str, Any], name: str) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(400, f"{name}: Input should be a valid integer", param=name)
    return v


class SimServer:
    """The HTTP API of one sim engine."""

    def __init__(
        self,
        profile: Profile,
        model: str,
        *,
        trace_file: str | None = None,
        lag_warn_s: float = 0.02,
        adapters: tuple[str, ...] = (),
    ) -> None:
        self.profile = profile
        self.model = model
        self.adapters = tuple(a for a in adapters if a and a != model)
        self.requests_by_model: dict[str, int] = {}
        self.max_model_len = profile.max_model_len
        self.trace = TraceWriter(trace_file) if trace_file else None
        self.engine = EngineLoop(profile, trace=self.trace, lag_warn_s=lag_warn_s)
        self.answerer = Answerer(profile.quality, lambda: self.engine.cluster.kv_usage())
        self.http = HttpServer(self.handle)
        self._engine_task: asyncio.Task[None] | None = None
        self.created = int(time.time())
        self.host = "127.0.0.1"
        self.port = 0
        self.requests_total = 0

    async def start(self, host: str, port: int) -> int:
        self._engine_task = asyncio.get_running_loop().create_task(self.engine.run())
        self.host = host
        self.port = await self.http.start(host, port)
        return self.port

    async def stop(self) -> None:
        await self.http.stop()
        if self._engine_task is not None:
            self._engine_task.cancel()
            try:
                await self._engine_task
            except asyncio.CancelledError:
                pass
        if self.trace is not None:
            self.trace.close()

    # -- routing -------------------------------------------------------------------------

    async def handle(self, req: HttpRequest, conn: HttpConnection) -> None:
        routes: dict[str, tuple[str, Callable[[HttpRequest, HttpConnection], Awaitable[None]]]] = {
            "/v1/chat/completions": ("POST", self.completions),
            "/v1/completions": ("POST", self.completions),
            "/v1/models": ("GET", self.models),
            "/health": ("GET", self.health),
            "/metrics": ("GET", self.metrics),
            "/version": ("GET", self.version),
            "/reset_prefix_cache": ("POST", self.reset_prefix_cache),
            "/admin/replicas": ("POST", functools.partial(admin.replicas, self.engine)),
            "/admin/fault": ("POST", functools.partial(faults.fault, self.engine)),
            "/admin/events": ("GET", functools.partial(faults.events, self.engine)),
        }
        route = routes.get(req.path.rstrip("/") or "/")
        if route is None:
            # What FastAPI (so vLLM) answers for an unknown path or method.
            conn.send_json(404, {"detail": "Not Found"})
            return
        method, fn = route
        if req.path.startswith("/admin/"):
            why = admintoken.refusal(self.host, os.environ.get(admintoken.TOKEN_ENV), req.headers)
            if why is not None:
                conn.send_json(401, {"error": {"message": why, "type": "AuthenticationError"}})
                return
        if req.method != method and not (req.method == "HEAD" and method == "GET"):
            conn.send_json(405, {"detail": "Method Not Allowed"}, headers=[("Allow", method)])
            return
        try:
            await fn(req, conn)
        except ApiError as e:
            conn.send_json(e.status, e.body())

    async def health(self, req: HttpRequest, conn: HttpConnection) -> None:
        conn.send(200, b"", content_type="application/json")

    async def version(self, req: HttpRequest, conn: HttpConnection) -> None:
        conn.send_json(
            200,
            {"version": SIM_VERSION, "engine": "pytest-llmslo-sim", "profile": self.profile.name},
        )

    async def reset_prefix_cache(self, req: HttpRequest, conn: HttpConnection) -> None:
        """vLLM's dev-mode ``POST /reset_prefix_cache``: cached blocks no request holds are
        dropped; ``success`` is false while requests run (vLLM's reset then fails too)."""
        ok, freed = self.engine.cluster.reset_prefix_cache()
        conn.send_json(200, {"success": ok, "evicted_blocks": freed})

    async def models(self, req: HttpRequest, conn: HttpConnection) -> None:
        conn.send_json(
            200,
            {
                "object": "list",
                "data": [
                    {
                        "id": name,
                        "object": "model",
                        "created": self.created,
                        "owned_by": "pytest-llmslo",
                        "root": self.model,
                        "parent": None if name == self.model else self.model,
                        "max_model_len": self.max_model_len,
                        "permission": [],
                    }
                    for name in (self.model, *self.adapters)
                ],
            },
        )

    async def metrics(self, req: HttpRequest, conn: HttpConnection) -> None:
        conn.send(200, self.metrics_text().encode(), content_type="text/plain; version=0.0.4")

    # -- completions ---------------------------------------------------------------------

    def _parse(self, req: HttpRequest, chat: bool) -> tuple[dict[str, Any], list[str]]:
        try:
            body = json.loads(req.body)
        except (ValueError, UnicodeDecodeError) as e:
            raise ApiError(400, f"JSON decode error: {e}") from None
        if not isinstance(body, dict):
            raise ApiError(
                400, "Input should be a valid dictionary or object to extract fields from"
            )
        model = body.get("model")
        if model is not None and model != self.model and model not in self.adapters:
            raise ApiError(
                HTTPStatus.NOT_FOUND,
                f"The model `{model}` does not exist.",
                "NotFoundError",
                "model",
            )
        if chat:
            messages = body.get("messages")
            if messages is None:
                raise ApiError(400, "messages: Field required", param="messages")
            if not isinstance(messages, list) or not messages:
                raise ApiError(400, "messages: Input should be a non-empty list", param="messages")
            if not all(isinstance(m, dict) for m in messages):
                raise ApiError(400, "messages: each message should be an object", param="messages")
            tokens = chat_tokens(messages)
        else:
            prompt = body.get("prompt")
            if prompt is None:
                raise ApiError(400, "prompt: Field required", param="prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
                prompt = prompt[0]
            if isinstance(prompt, list) and prompt and all(isinstance(t, str) for t in prompt):
                raise ApiError(
                    400, "batched prompts are not supported by the sim engine", param="prompt"
                )
            if not isinstance(prompt, (str, list)) or (isinstance(prompt, str) and not prompt):
                raise ApiError(400, "prompt: Input should be a non-empty string", param="prompt")
            tokens = completion_tokens(prompt)
        return body, tokens

    async def completions(self, req: HttpRequest, conn: HttpConnection) -> None:
        chat = req.path.rstrip("/").endswith("chat/completions")
        body, tokens = self._parse(req, chat)
        n_prompt = len(tokens)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise ApiError(400, "stream: Input should be a valid boolean", param="stream")
        opts = body.get("stream_options")
        if opts is not None and not stream:
            raise ApiError(
                400,
                "Stream options can only be defined when `stream=True`.",
                param="stream_options",
            )
        if opts is not None and not isinstance(opts, dict):
            raise ApiError(400, "stream_options: Input should be an object", param="stream_options")
        opts = opts or {}
        n = body.get("n", 1)
        if n != 1:
            raise ApiError(400, "n: only n=1 is supported by the sim engine", param="n")
        max_tokens = _int_field(body, "max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = _int_field(body, "max_tokens")
        min_tokens = _int_field(body, "min_tokens") or 0
        if n_prompt >= self.max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"your request has {n_prompt} input tokens. Please reduce the length of the "
                "input messages.",
                param="messages" if chat else "prompt",
            )
        if max_tokens is None:
            remaining = self.max_model_len - n_prompt
            max_tokens = remaining if chat else min(DEFAULT_COMPLETION_MAX_TOKENS, remaining)
        if max_tokens < 1:
            raise ApiError(
                400, f"max_tokens must be at least 1, got {max_tokens}.", param="max_tokens"
            )
        if min_tokens < 0 or min_tokens > max_tokens:
            raise ApiError(
                400,
                f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                f"got {min_tokens}.",
                param="min_tokens",
            )
        if n_prompt + max_tokens > self.max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"you requested {n_prompt + max_tokens} tokens ({n_prompt} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages "
                "or completion.",
                param="max_tokens",
            )
        prefix = "chatcmpl-" if chat else "cmpl-"
        rid = prefix + (req.headers.get("x-request-id") or uuid.uuid4().hex)
        rid = rid.replace('"', "").replace("\\", "")
        cluster = self.engine.cluster
        hashes = block_hashes(tokens, cluster.block_size) if cluster.enable_prefix_caching else ()
        sim_req = SimRequest(rid, n_prompt, max_tokens, block_hashes=hashes)
        self.requests_total += 1
        name = str(body.get("model") or self.model)
        self.requests_by_model[name] = self.requests_by_model.get(name, 0) + 1
        answer = self._eval_answer(body, chat)
        st = Stream(
            conn,
            sim_req,
            chat=chat,
            model=self.model,
            stream=stream,
            include_usage=bool(opts.get("include_usage")),
            continuous_usage=bool(opts.get("continuous_usage_stats")),
            # An eval item's words follow from the item, as greedy decoding's would.
            seed=self.requests_total if answer is None else answer[1].shift,
            answer=answer,
        )
        try:
            self.engine.submit(st)
        except ValueError as e:
            raise ApiError(400, str(e)) from None
        # Tokens come at the earliest at the end of the next step, after this head.
        if stream:
            conn.start_stream()

        def on_close() -> None:
            self.engine.abort(sim_req)

        conn.on_close.append(on_close)
        try:
            await st.done
        finally:
            if on_close in conn.on_close:
                conn.on_close.remove(on_close)

    def _eval_answer(self, body: Mapping[str, Any], chat: bool) -> tuple[Answerer, Answer] | None:
        found = self.answerer.read(body, chat)
        return None if found is None else (self.answerer, found)

    # -- metrics -------------------------------------------------------------------------

    def metrics_text(self) -> str:
        engine = self.engine
        return metrics_text(
            engine.cluster,
            engine.latency,
            engine.lateness,
            self.model,
            self.requests_by_model,
            self.adapters,
        )
