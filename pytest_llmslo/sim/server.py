"""The sim engine as an OpenAI-compatible server: the API on top of the scheduler
(``engineloop.py`` runs it on the wall clock, ``stream.py`` writes each request's output,
``requestbody.py`` reads and checks each request).

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
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from . import admin, admintoken, replicafaults
from .answerer import Answer, Answerer
from .engineloop import EngineLoop, TraceWriter
from .httpd import HttpConnection, HttpRequest, HttpServer
from .metrics_exposition import metrics_text
from .profiles import Profile
from .requestbody import ApiError, CompletionRequest, read_completion
from .scheduler import SimRequest
from .stream import Stream, StreamShape
from .tokens import block_hashes

__all__ = ["SIM_VERSION", "SimServer"]

SIM_VERSION = "0.1.0"


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
            "/admin/fault": ("POST", functools.partial(replicafaults.fault, self.engine)),
            "/admin/events": ("GET", functools.partial(replicafaults.events, self.engine)),
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

    async def completions(self, req: HttpRequest, conn: HttpConnection) -> None:
        chat = req.path.rstrip("/").endswith("chat/completions")
        asked = read_completion(
            req.body,
            chat=chat,
            models=(self.model, *self.adapters),
            max_model_len=self.max_model_len,
        )
        sim_req = self._sim_request(asked, req.headers.get("x-request-id"))
        self.requests_total += 1
        name = asked.model or self.model
        self.requests_by_model[name] = self.requests_by_model.get(name, 0) + 1
        answer = self._eval_answer(asked.body, chat)
        shape = StreamShape(
            chat=chat,
            model=self.model,
            stream=asked.stream,
            include_usage=asked.include_usage,
            continuous_usage=asked.continuous_usage,
        )
        # An eval item's words follow from the item, as greedy decoding's would.
        seed = self.requests_total if answer is None else answer[1].shift
        st = Stream(conn, sim_req, shape, seed=seed, answer=answer)
        try:
            self.engine.submit(st)
        except ValueError as e:
            raise ApiError(400, str(e)) from None
        # Tokens come at the earliest at the end of the next step, after this head.
        if asked.stream:
            conn.start_stream()
        await self._until_done(st, conn)

    def _sim_request(self, asked: CompletionRequest, request_id: str | None) -> SimRequest:
        """The scheduler's request for ``asked``: its id (the client's ``x-request-id``
        when given), prompt length, output length and prompt blocks."""
        rid = ("chatcmpl-" if asked.chat else "cmpl-") + (request_id or uuid.uuid4().hex)
        rid = rid.replace('"', "").replace("\\", "")
        cluster = self.engine.cluster
        tokens = asked.tokens
        hashes = block_hashes(tokens, cluster.block_size) if cluster.enable_prefix_caching else ()
        return SimRequest(rid, len(tokens), asked.max_tokens, block_hashes=hashes)

    async def _until_done(self, st: Stream, conn: HttpConnection) -> None:
        """Wait for the request's last token; a client that leaves aborts it."""

        def on_close() -> None:
            self.engine.abort(st.req)

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
