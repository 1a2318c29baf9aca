"""A minimal OpenAI-compatible streaming server for the launcher tests (stdlib only).

    python fake_engine.py --host 127.0.0.1 --port P [--ready-after S] [--exit-after S]
        [--spawn-child] [--ignore-sigterm] [--model NAME]

``--ready-after`` delays /health; ``--exit-after`` exits before getting ready;
``--spawn-child`` leaves a grandchild in the process group (teardown must kill it too);
``--ignore-sigterm`` forces the SIGKILL path.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", default="fake-model")
    ap.add_argument("--ready-after", type=float, default=0.0)
    ap.add_argument("--exit-after", type=float, default=None)
    ap.add_argument("--spawn-child", action="store_true")
    ap.add_argument("--ignore-sigterm", action="store_true")
    args, _ = ap.parse_known_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print(
        f"fake engine starting pid={os.getpid()} token={os.environ.get('HF_TOKEN', '')}", flush=True
    )
    if args.exit_after is not None:
        time.sleep(args.exit_after)
        print("fatal: simulated start failure", flush=True)
        sys.exit(3)
    if args.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"child pid={child.pid}", flush=True)
    t0 = time.monotonic()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a: object) -> None:
            pass

        def _json(self, code: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            ready = time.monotonic() - t0 >= args.ready_after
            if self.path == "/health":
                self._json(200 if ready else 503, {"status": "ok" if ready else "loading"})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": args.model}]})
            elif self.path == "/version":
                self._json(200, {"version": "9.9.9-fake"})
            else:
                self._json(404, {"error": "not found"})

        def do_POST(self) -> None:
            n = int(self.headers.get("content-length", 0))
            body = json.loads(self.rfile.read(n) or b"{}")
            tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 8)
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()

            def send(obj: object) -> None:
                data = f"data: {json.dumps(obj) if not isinstance(obj, str) else obj}\n\n"
                raw = data.encode()
                self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
                self.wfile.flush()

            for i in range(tokens):
                send({"choices": [{"index": 0, "delta": {"content": f"t{i} "}}]})
                time.sleep(0.002)
            send({"choices": [], "usage": {"completion_tokens": tokens}})
            send("[DONE]")
            self.wfile.write(b"0\r\n\r\n")

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"fake engine listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
