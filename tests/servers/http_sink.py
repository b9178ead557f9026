"""A real HTTP server that receives alert webhooks for the tests.

Usage: http_sink.py RECORD_FILE MODE [PORT]
  MODE: ok (204), slow (answers after 30 s), refuse (403), error (500)
  PORT: 0 or absent picks a free one.
Prints "PORT <n>" on stdout once listening, then appends one JSON line per request to RECORD_FILE:
{"path": ..., "headers": {...}, "body": <the JSON body, or the text when it is not JSON>}.
"""

import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    record, mode = sys.argv[1], sys.argv[2]
    port = int(sys.argv[3]) if len(sys.argv) > 3 else 0

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length).decode("utf-8", "replace")
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw
            with open(record, "a", encoding="utf-8") as out:
                out.write(json.dumps({"path": self.path, "headers": dict(self.headers), "body": body}) + "\n")
            if mode == "slow":
                time.sleep(30)
            status = {"ok": 204, "slow": 204, "refuse": 403, "error": 500}[mode]
            self.send_response(status)
            payload = b"" if status == 204 else b"no thanks"
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if payload:
                self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
