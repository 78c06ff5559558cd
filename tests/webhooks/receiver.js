// A webhook receiver built on the Standard Webhooks reference library (npm `standardwebhooks`),
// for tests/it/webhooks.rs — receiver.py's twin: it verifies every POST with
// `new Webhook(secret).verify(body, headers)`, answers 204 (verified) or 401 (refused), and
// prints one JSON line per POST: {"webhookId", "ok", "error", "ids"}.
//
// Usage: NODE_PATH=target/test-node/node_modules node receiver.js SECRET [--raw]
// (--raw: the secret's bytes are the key). Listens on 127.0.0.1 at a free port and prints
// `listening PORT` first.
"use strict";
const http = require("http");
const { Webhook } = require("standardwebhooks");

const [secret, ...flags] = process.argv.slice(2);
const webhook = flags.includes("--raw")
  ? new Webhook(secret, { format: "raw" })
  : new Webhook(secret);

const server = http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks).toString("utf8");
    const record = { webhookId: req.headers["webhook-id"] ?? null, ok: false, error: null, ids: [] };
    try {
      const payload = webhook.verify(body, req.headers);
      record.ok = true;
      record.ids = payload.events.map((e) => e.id);
    } catch (e) {
      record.error = e.message;
    }
    process.stdout.write(JSON.stringify(record) + "\n");
    res.writeHead(record.ok ? 204 : 401);
    res.end();
  });
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
