"""A webhook receiver built on the Standard Webhooks reference library (PyPI `standardwebhooks`),
for tests/it/webhooks.rs: it verifies every POST with `Webhook(secret).verify(body, headers)`,
answers 204 (verified) or 401 (refused), and prints one JSON line per POST:
{"webhookId": ..., "ok": true|false, "error": ..., "ids": [the events' ids]}.

Usage: receiver.py SECRET [--raw]   (--raw: the secret's bytes are the key, no whsec_ decoding)
It listens on 127.0.0.1 at a free port and prints `listening PORT` first.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks import Webhook, WebhookVerificationError

secret = sys.argv[1]
webhook = Webhook(secret.encode() if "--raw" in sys.argv[2:] else secret)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {name: value for name, value in self.headers.items()}
        record = {"webhookId": headers.get("webhook-id"), "ok": False, "error": None, "ids": []}
        try:
            payload = webhook.verify(body, headers)
            record["ok"] = True
            record["ids"] = [event["id"] for event in payload["events"]]
        except WebhookVerificationError as e:
            record["error"] = str(e)
        print(json.dumps(record), flush=True)
        self.send_response(204 if record["ok"] else 401)
        self.end_headers()

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()
