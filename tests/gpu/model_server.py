"""A real model behind an OpenAI-compatible streaming API, for the GPU checks.

A randomly initialised Llama-shaped decoder (``transformers``, bf16 on CUDA) decodes
greedily with its KV cache, one request at a time in arrival order, and streams each token
as it is produced (``/v1/chat/completions`` and ``/v1/completions``, SSE, ``usage`` on
request). Words of the prompt are its tokens (a word hashes to an id), so the usage it
reports is exact for the prompts it got. Nothing here knows the harness: it is a server
whose GPU work is real, so that NVML's figures (utilisation, memory, power, energy) can be
checked against work that really ran. ``--backend numpy`` runs a tiny numpy stand-in of
the same loop, for checking the server itself on a machine without a GPU.

    python tests/gpu/model_server.py --port 0      # prints "ready on http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import json
import queue
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "llmslo-gpu-check"
VOCAB = 32000


class TorchDecoder:
    """Greedy decoding with a KV cache on the GPU; ``weights_mib`` is what the model holds."""

    def __init__(self, layers: int, hidden: int) -> None:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        self.torch = torch
        cfg = LlamaConfig(
            vocab_size=VOCAB, hidden_size=hidden, intermediate_size=4 * hidden,
            num_hidden_layers=layers, num_attention_heads=hidden // 128,
            num_key_value_heads=max(hidden // 512, 1), max_position_embeddings=8192,
        )  # fmt: skip
        torch.manual_seed(0)
        with torch.device("cuda"):
            self.model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
        params = self.model.parameters()
        self.weights_mib = sum(p.numel() * p.element_size() for p in params) / 2**20
        self.device_name = torch.cuda.get_device_name(0)

    def generate(self, ids: list[int], n: int, emit: Any) -> None:
        torch = self.torch
        with torch.inference_mode():
            x = torch.tensor([ids], device="cuda")
            out = self.model(input_ids=x, use_cache=True)
            for _ in range(n):
                nxt = out.logits[:, -1].argmax(-1)
                emit(int(nxt.item()))  # .item() waits for the step: the token exists now
                out = self.model(
                    input_ids=nxt[:, None], past_key_values=out.past_key_values, use_cache=True
                )


class NumpyDecoder:
    """The same loop over a tiny numpy model: for checking the server without a GPU."""

    def __init__(self, layers: int, hidden: int) -> None:
        import numpy as np

        self.np = np
        rng = np.random.default_rng(0)
        self.emb = rng.standard_normal((VOCAB, 64)).astype(np.float32)
        self.w = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(layers)]
        self.weights_mib = (self.emb.nbytes + sum(w.nbytes for w in self.w)) / 2**20
        self.device_name = "cpu"

    def generate(self, ids: list[int], n: int, emit: Any) -> None:
        h = self.emb[ids].mean(axis=0)
        for _ in range(n):
            for w in self.w:
                h = self.np.tanh(h @ w)
            tok = int(self.np.argmax(self.emb @ h))
            emit(tok)
            h = self.emb[tok]


class Engine:
    """One decoding thread; requests wait their turn in arrival order."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder
        self.jobs: queue.Queue[tuple[list[int], int, queue.Queue[int | None]]] = queue.Queue()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            ids, n, out = self.jobs.get()
            try:
                self.decoder.generate(ids, n, out.put)
            finally:
                out.put(None)

    def submit(self, ids: list[int], n: int) -> queue.Queue[int | None]:
        out: queue.Queue[int | None] = queue.Queue()
        self.jobs.put((ids, n, out))
        return out


def tokenize(text: str) -> list[int]:
    return [zlib.crc32(w.encode()) % VOCAB for w in text.split()] or [0]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    engine: Engine

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
        elif self.path == "/health":
            self._json(200, {"status": "ok", "weights_mib": self.engine.decoder.weights_mib})
        else:
            self._json(404, {"error": {"message": f"no {self.path}"}})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        chat = self.path == "/v1/chat/completions"
        if not chat and self.path != "/v1/completions":
            self._json(404, {"error": {"message": f"no {self.path}"}})
            return
        if chat:
            text = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        else:
            text = str(body.get("prompt", ""))
        ids = tokenize(text)
        n = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        stream = bool(body.get("stream"))
        usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
        out = self.engine.submit(ids, n)
        kind = "chat.completion.chunk" if chat else "text_completion"
        rid = f"req-{time.monotonic_ns()}"

        def choice(tok_text: str, finish: str | None) -> dict[str, Any]:
            if chat:
                return {"index": 0, "delta": {"content": tok_text}, "finish_reason": finish}
            return {"index": 0, "text": tok_text, "finish_reason": finish}

        usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}
        if not stream:
            toks = []
            while (t := out.get()) is not None:
                toks.append(f" t{t}")
            c = choice("".join(toks), "length")
            if chat:
                c = {"index": 0, "message": {"role": "assistant", "content": "".join(toks)},
                     "finish_reason": "length"}  # fmt: skip
            self._json(200, {"id": rid, "object": kind.removesuffix(".chunk"),
                             "model": MODEL, "choices": [c], "usage": usage})  # fmt: skip
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(obj: dict[str, Any]) -> None:
            self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

        sent = 0
        while (t := out.get()) is not None:
            sent += 1
            finish = "length" if sent == n else None
            chunk = choice(f" t{t}", finish)
            event({"id": rid, "object": kind, "model": MODEL, "choices": [chunk]})
        if usage_on:
            event({"id": rid, "object": kind, "model": MODEL, "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--backend", choices=("torch", "numpy"), default="torch")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=2048)
    a = p.parse_args()
    decoder = (TorchDecoder if a.backend == "torch" else NumpyDecoder)(a.layers, a.hidden)
    Handler.engine = Engine(decoder)
    srv = ThreadingHTTPServer((a.host, a.port), Handler)
    srv.daemon_threads = True
    host, port = srv.server_address[:2]
    print(f"weights {decoder.weights_mib:.0f} MiB on {decoder.device_name}", flush=True)
    print(f"ready on http://{host}:{port}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
