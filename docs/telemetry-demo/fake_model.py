"""A scripted OpenAI-compatible model for the telemetry demo (docs/perf/telemetry.md):
its first turn only calls `write_file` (a typo unless the request says what the check
said), its second submits a success with a short answer. Usage: fake_model.py PORT"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


def call(cid, name, args):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}


class Model(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])) or b"{}")
        msgs = body.get("messages", [])
        turns = sum(1 for m in msgs if m.get("role") == "assistant")
        told = any("holds 'helo'" in json.dumps(m.get("content")) for m in msgs
                   if m.get("role") == "user")
        if turns == 0:
            text = "hello\n" if told else "helo\n"
            calls, content = [call("w", "write_file", {"path": "greeting.txt", "content": text})], None
        else:
            calls = [call("done", "submit_result", {"status": "success", "summary": "wrote the greeting"})]
            content = "Done: greeting.txt says hello."
        answer = {"id": "chatcmpl-demo", "object": "chat.completion", "model": body.get("model"),
                  "choices": [{"index": 0, "finish_reason": "tool_calls",
                               "message": {"role": "assistant", "content": content, "tool_calls": calls}}],
                  "usage": {"prompt_tokens": 10 + 5 * len(msgs), "completion_tokens": 5, "total_tokens": 15 + 5 * len(msgs)}}
        out = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(sys.argv[1])), Model).serve_forever()
