"""Keeps every OTLP/HTTP JSON request it gets (traces only) in DIR/traces-N.json and answers
200: how docs/telemetry-sample-trace.json was taken. Usage: otlp_sink.py PORT DIR"""
import os
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

PORT, DIR = int(sys.argv[1]), sys.argv[2]
os.makedirs(DIR, exist_ok=True)
count = [0]


class Sink(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path.endswith("/v1/traces") and len(body) > 2:
            count[0] += 1
            with open(os.path.join(DIR, f"traces-{count[0]}.json"), "wb") as f:
                f.write(body)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", PORT), Sink).serve_forever()
