#!/usr/bin/env python3
"""Pushes a campaign JSONL file onto mail-worker's intake queue (docs/queue.md).

    pip install 'redis>=5'
    REDIS_URL=redis://127.0.0.1:6379 python3 examples/producers/python/push.py campaign.jsonl

INTAKE_QUEUE names the queue (default {mail-worker:campaign-sends}). Each non-blank line is one
job, its task id the line's "id" (a fresh UUID if it has none), pushed by lua/intake/push.lua in calls
of 500 lines; a line already queued is skipped. The replicas judge each line as
`mail-worker enqueue` does: a bad one is dead-lettered (`mail-worker queue dead`).
"""

import json
import os
import pathlib
import sys
import uuid

import redis

PUSH = (pathlib.Path(__file__).resolve().parents[3] / "lua" / "intake" / "push.lua").read_text()
CHUNK = 500


def task_id(line: bytes) -> str:
    """The line's id when it is a UUID (so a second push of it is skipped), else a fresh one."""
    try:
        return str(uuid.UUID(str(json.loads(line)["id"]).strip()))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return str(uuid.uuid4())


def push(client: redis.Redis, queue: str, lines: list[bytes]) -> int:
    """Pushes `lines` onto `queue`; returns how many jobs were new."""
    script = client.register_script(PUSH)
    keys = [f"{queue}:data", f"{queue}:active", f"{queue}:signal"]
    pushed = 0
    for start in range(0, len(lines), CHUNK):
        args: list[object] = [f"{queue}:meta"]
        for line in lines[start : start + CHUNK]:
            args += [task_id(line), line]
        pushed += script(keys=keys, args=args)
    return pushed


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} FILE.jsonl", file=sys.stderr)
        return 2
    queue = os.environ.get("INTAKE_QUEUE", "{mail-worker:campaign-sends}")
    client = redis.Redis.from_url(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"))
    data = pathlib.Path(sys.argv[1]).read_bytes()
    lines = [l.rstrip(b"\r") for l in data.split(b"\n") if l.strip()]
    pushed = push(client, queue, lines)
    print(f"{pushed} lines pushed onto {queue} ({len(lines) - pushed} already queued)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
