#!/usr/bin/env node
// Pushes a campaign JSONL file onto mail-worker's intake queue (docs/queue.md).
//
//   cd examples/producers/node && npm install
//   REDIS_URL=redis://127.0.0.1:6379 node examples/producers/node/push.js campaign.jsonl
//
// INTAKE_QUEUE names the queue (default {mail-worker:campaign-sends}); a comma-separated REDIS_URL
// lists the seeds of a Redis Cluster. Each non-blank line is one
// job, its task id the line's "id" (a fresh UUID if it has none), pushed by lua/intake/push.lua in calls
// of 500 lines; a line already queued is skipped. The replicas judge each line as
// `mail-worker enqueue` does: a bad one is dead-lettered (`mail-worker queue dead`).
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const crypto = require("node:crypto");
const Redis = require("ioredis");

const PUSH = fs.readFileSync(path.join(__dirname, "..", "..", "..", "lua", "intake", "push.lua"), "utf8");
const CHUNK = 500;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// The line's id when it is a UUID (so a second push of it is skipped), else a fresh one.
function taskId(line) {
  try {
    const id = String(JSON.parse(line.toString("utf8")).id).trim();
    if (UUID.test(id)) return id.toLowerCase();
  } catch {
    // not JSON: the consumer dead-letters it with the file import's reason
  }
  return crypto.randomUUID();
}

// Pushes `lines` (Buffers) onto `queue`; resolves to how many jobs were new.
// `redis`: an ioredis Redis or Cluster client.
// "1 line", "2 lines" (as mail-worker's own messages say it).
function counted(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

async function push(redis, queue, lines) {
  redis.defineCommand("intakePush", { lua: PUSH });
  let pushed = 0;
  for (let start = 0; start < lines.length; start += CHUNK) {
    const keys = [`${queue}:data`, `${queue}:active`, `${queue}:signal`];
    const args = [];
    for (const line of lines.slice(start, start + CHUNK)) {
      const id = taskId(line);
      keys.push(`${queue}:meta:${id}`);
      args.push(id, line);
    }
    pushed += await redis.intakePush(keys.length, ...keys, ...args);
  }
  return pushed;
}

async function main() {
  if (process.argv.length !== 3) {
    console.error(`usage: ${process.argv[1]} FILE.jsonl`);
    return 2;
  }
  const queue = process.env.INTAKE_QUEUE || "{mail-worker:campaign-sends}";
  const urls = (process.env.REDIS_URL || "redis://127.0.0.1:6379").split(",").map((u) => u.trim());
  // Several URLs: the seeds of a Redis Cluster, as mail-worker reads REDIS_URL.
  const redis = urls.length > 1 ? new Redis.Cluster(urls) : new Redis(urls[0]);
  try {
    const data = fs.readFileSync(process.argv[2]);
    const lines = [];
    let start = 0;
    while (start <= data.length) {
      let end = data.indexOf(0x0a, start);
      if (end < 0) end = data.length;
      let line = data.subarray(start, end);
      if (line.length && line[line.length - 1] === 0x0d) line = line.subarray(0, line.length - 1);
      if (line.toString("latin1").trim()) lines.push(line);
      start = end + 1;
    }
    const pushed = await push(redis, queue, lines);
    console.log(`${counted(pushed, "line", "lines")} pushed onto ${queue} (${lines.length - pushed} already queued)`);
    return 0;
  } finally {
    redis.disconnect();
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`push.js: ${e.message}`);
    process.exit(1);
  },
);
