#!/usr/bin/env python3
"""A stand-in for an OpenAI-compatible chat-completions endpoint, for runguard's narrative tests.

Usage: chat_completions.py PORT MODE RECORD_FILE

PORT 0 picks a free port and prints it on the first line of stdout. Every request is appended to
RECORD_FILE as one JSON line: {"path", "authorization", "body"} (the body as the client sent it).
MODE decides the answer:
  ok        a completion whose message is a short narrative
  slow      the same, after 30 seconds
  error     HTTP 500 with an error object
  nonsense  HTTP 200 with a body that is not JSON
  empty     a completion whose message is only whitespace
Only the standard library is used.
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NARRATIVE = (
    "The all-reduce stalled when node-07's InfiniBand link failed (NCCL WARN status 12); after the "
    "one-minute collective timeout every rank's watchdog ended the job. Check node-07's HCA and cable "
    "before returning it to service."
)
MODES = ("ok", "slow", "error", "nonsense", "empty")
SLOW_SECONDS = 30


def completion(content):
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": "test-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


def make_handler(mode, record_file, lock):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode("utf-8", errors="replace")
            with lock, open(record_file, "a", encoding="utf-8") as record:
                record.write(
                    json.dumps(
                        {
                            "path": self.path,
                            "authorization": self.headers.get("Authorization"),
                            "body": body,
                        }
                    )
                    + "\n"
                )
            if mode == "slow":
                time.sleep(SLOW_SECONDS)
            if mode in ("ok", "slow"):
                self.answer(200, "application/json", json.dumps(completion(NARRATIVE)))
            elif mode == "error":
                self.answer(500, "application/json", '{"error": {"message": "the model crashed"}}')
            elif mode == "nonsense":
                self.answer(200, "text/html", "<html><body>502 Bad Gateway</body></html>")
            else:
                self.answer(200, "application/json", json.dumps(completion("  \n\t ")))

        def answer(self, status, content_type, text):
            data = text.encode("utf-8")
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up waiting (the slow mode's purpose).
                pass

        def log_message(self, *args):
            pass

    return Handler


def main():
    if len(sys.argv) != 4 or sys.argv[2] not in MODES:
        sys.exit(f"usage: {sys.argv[0]} PORT {{{'|'.join(MODES)}}} RECORD_FILE")
    port, mode, record_file = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(mode, record_file, threading.Lock()))
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
