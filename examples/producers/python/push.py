#!/usr/bin/env python3
"""Pushes a campaign JSONL file onto mail-worker's intake queue (docs/queue.md).

    pip install 'redis>=5'
    REDIS_URL=redis://127.0.0.1:6379 python3 examples/producers/python/push.py campaign.jsonl

INTAKE_QUEUE names the queue (default {mail-worker:campaign-sends}); a comma-separated REDIS_URL
lists the seeds of a Redis Cluster. Each non-blank line is one
job, its task id the line's "id" (a fresh UUID if it has none), pushed by lua/intake/push.lua in calls
of 500 lines; a line already queued is skipped. The replicas judge each line as
`mail-worker enqueue` does: a bad one is dead-lettered (`mail-worker queue dead`).
"""

import json
import os
import pathlib
import sys
import uuid

from urllib.parse import urlparse

import redis
import redis.cluster

PUSH = (pathlib.Path(__file__).resolve().parents[3] / "lua" / "intake" / "push.lua").read_text()
CHUNK = 500


def task_id(line: bytes) -> str:
    """The line's id when it is a UUID (so a second push of it is skipped), else a fresh one."""
    try:
        return str(uuid.UUID(str(json.loads(line)["id"]).strip()))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return str(uuid.uuid4())


def counted(n: int, one: str, many: str) -> str:
    """ "1 line", "2 lines" (as mail-worker's own messages say it)."""
    return f"{n} {one if n == 1 else many}"


def push(client, queue: str, lines: list[bytes]) -> int:
    """Pushes `lines` onto `queue` (a redis.Redis or redis.cluster.RedisCluster client); returns
    how many jobs were new."""
    script = client.register_script(PUSH)
    pushed = 0
    for start in range(0, len(lines), CHUNK):
        keys = [f"{queue}:data", f"{queue}:active", f"{queue}:signal"]
        args: list[object] = []
        for line in lines[start : start + CHUNK]:
            tid = task_id(line)
            keys.append(f"{queue}:meta:{tid}")
            args += [tid, line]
        pushed += script(keys=keys, args=args)
    return pushed


def main() -> int:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} FILE.jsonl", file=sys.stderr)
        return 2
    queue = os.environ.get("INTAKE_QUEUE", "{mail-worker:campaign-sends}")
    urls = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379").split(",")
    if len(urls) > 1:  # the seeds of a Redis Cluster, as mail-worker reads REDIS_URL
        nodes = [redis.cluster.ClusterNode(u.hostname, u.port or 6379) for u in map(urlparse, urls)]
        client = redis.cluster.RedisCluster.from_url(urls[0].strip(), startup_nodes=nodes)
    else:
        client = redis.Redis.from_url(urls[0])
    data = pathlib.Path(sys.argv[1]).read_bytes()
    lines = [l.rstrip(b"\r") for l in data.split(b"\n") if l.strip()]
    pushed = push(client, queue, lines)
    print(f"{counted(pushed, 'line', 'lines')} pushed onto {queue} ({len(lines) - pushed} already queued)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
