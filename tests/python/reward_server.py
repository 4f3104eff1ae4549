"""A reward server on loopback for tests/rewards/test_http_reward.cpp (standard library only).

Prints "PORT <n>" once listening on 127.0.0.1. Paths:
  POST /score        each sample's score is len(solution_str); parts: has_truth, slow
                     requests overlap (0.2 s each) so the test can count concurrency
  POST /flaky        503 for the first two requests, then as /score
  POST /slow         sleeps 5 s (past the test's timeout)
  POST /bad          400 with a message
  POST /wrong_count  one score whatever the batch
  POST /huge         a 20 MiB answer (past the client's 16 MiB bound)
  GET  /stats        {"requests": n, "max_concurrent": n}
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
state = {"requests": 0, "in_flight": 0, "max_concurrent": 0, "flaky": 0}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format, *args):
        pass

    def reply(self, status, payload):
        body = json.dumps(payload).encode() if not isinstance(payload, bytes) else payload
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        with lock:
            self.reply(200, {"requests": state["requests"], "max_concurrent": state["max_concurrent"]})

    def do_POST(self):
        samples = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["samples"]
        with lock:
            state["requests"] += 1
            state["in_flight"] += 1
            state["max_concurrent"] = max(state["max_concurrent"], state["in_flight"])
            state["flaky"] += self.path == "/flaky"
            flaky_count = state["flaky"]
        try:
            if self.path == "/slow":
                time.sleep(5)
            if self.path == "/missing":
                return self.reply(404, b"not found")
            if self.path == "/bad":
                return self.reply(400, b"bad request: no such task")
            if self.path == "/flaky" and flaky_count <= 2:
                return self.reply(503, b"warming up")
            if self.path == "/wrong_count":
                return self.reply(200, {"scores": [1.0]})
            if self.path == "/huge":
                try:
                    return self.reply(200, b"[" + b" " * (20 << 20) + b"]")
                except OSError:
                    return None  # the client stopped reading, as it should

            time.sleep(0.2)
            scores = [{"score": len(s["solution_str"]), "has_truth": s["ground_truth"] is not None,
                       "prompt_seen": s["prompt"] == "What is 6*7?"} for s in samples]
            self.reply(200, {"scores": scores} if self.path != "/plain" else scores)
        finally:
            with lock:
                state["in_flight"] -= 1


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print("PORT", server.server_address[1], flush=True)
server.serve_forever()
