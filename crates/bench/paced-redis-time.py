#!/usr/bin/env python3
"""Redis's own time per decision (`usec_per_call` of `cmdstat_evalsha` after `CONFIG RESETSTAT`)
of lua/paced/check_and_reserve.lua beside lua/fixed_window/check_and_reserve.lua, on three
workloads (BENCHMARKS.md 1b, re-run for issue 23):

  (a) spread:  30,000 calls, each on a different one of 100,000 seeded mailboxes (`HSET <state>
               seeded 1`, as benchmark 1 seeds): every call a mailbox's first reservation.
  (b) one:     30,000 calls on one mailbox with one message id at a fixed `now`: allowed, booked,
               then its slot still ahead (fixed-window: 25 allowed, then minute denials).
  (c) steady:  1,000 mailboxes on the caller's clock (virtual time), messages arriving at random
               (mean 2.6 s apart per mailbox, a little under the 2.44 s pace), each allowed at once,
               or booked and called again at its slot, released ("done", by EVAL so that it is
               counted apart) 300 ms after it was allowed; 2 virtual minutes of warm-up, then 5
               measured. Fixed-window: the same arrivals, a denial called again when told.

Also prints the Redis commands each decision runs (the other cmdstats over the EVALSHA calls)
and the bytes per mailbox (MEMORY USAGE of its keys) at the end of (c), and per booked message.
Needs redis-server on PATH; starts its own on a random high port (the shared one's load does
not mix in) and stops it after.

  crates/bench/paced-redis-time.py [--rounds 3] [--paced FILE] [--fixed FILE] [--only a,b,c]
"""

import argparse
import heapq
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PER_MINUTE, PER_DAY, IN_FLIGHT, LEASE, ALLOWANCE, GRACE = 25, 9000, 1000000, 40000, 1000, 900000
CALLS = 30000
ID = '6d61696c-2d77-6f72-6b65-722d62656e63'
TENANT = 'contoso.example'


class Redis:
    """A minimal RESP2 client: pipelined commands, replies decoded."""

    def __init__(self, port):
        self.sock = socket.create_connection(('127.0.0.1', port))
        self.buf = b''

    @staticmethod
    def encode(args):
        out = [b'*%d\r\n' % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b'$%d\r\n%s\r\n' % (len(a), a))
        return b''.join(out)

    def _line(self):
        while b'\r\n' not in self.buf:
            self.buf += self.sock.recv(1 << 20)
        line, self.buf = self.buf.split(b'\r\n', 1)
        return line

    def _reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b'+':
            return rest.decode()
        if t == b'-':
            raise RuntimeError(rest.decode())
        if t == b':':
            return int(rest)
        if t == b'$':
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.sock.recv(1 << 20)
            data, self.buf = self.buf[:n], self.buf[n + 2:]
            return data.decode()
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self._reply() for _ in range(n)]
        raise RuntimeError('bad reply %r' % line)

    def pipe(self, commands, chunk=2000):
        replies = []
        for i in range(0, len(commands), chunk):
            part = commands[i:i + chunk]
            self.sock.sendall(b''.join(self.encode(c) for c in part))
            replies.extend(self._reply() for _ in part)
        return replies

    def call(self, *args):
        return self.pipe([list(args)])[0]


def stats(r):
    out = {}
    for line in r.call('INFO', 'commandstats').splitlines():
        if line.startswith('cmdstat_'):
            name, fields = line[len('cmdstat_'):].split(':', 1)
            kv = dict(f.split('=') for f in fields.split(','))
            out[name] = (int(kv['calls']), float(kv['usec']))
    return out


SERVER = {'pid': None, 'cpu': 0.0}


def cpu_s():
    """The private redis-server's CPU time (user + system, s): not stretched by preemption."""
    f = open('/proc/%d/stat' % SERVER['pid']).read().rsplit(')', 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf('SC_CLK_TCK')


def reset(r):
    r.call('CONFIG', 'RESETSTAT')
    SERVER['cpu'] = cpu_s()


def summary(r, decisions_cmd='evalsha', release_commands_per_eval=1):
    cpu = cpu_s() - SERVER['cpu']
    s = stats(r)
    calls, usec = s.get(decisions_cmd, (0, 0.0))
    inner = sum(c for n, (c, _) in s.items() if n not in ('evalsha', 'eval', 'config', 'info'))
    inner -= s.get('eval', (0, 0))[0] * release_commands_per_eval
    SERVER['last_cpu_us'] = cpu * 1e6 / max(calls + s.get('eval', (0, 0))[0], 1)
    return usec / max(calls, 1), inner / max(calls, 1), calls


def paced_keys(prefix, mailbox):
    state = '%s:{%s}:%s' % (prefix, TENANT, mailbox)
    tenant = '%s:{%s}:tenant' % (prefix, TENANT)
    return [state, state + ':days', state + ':booked', state + ':sent', state + ':inflight',
            tenant, tenant + ':days']


def fixed_keys(prefix, mailbox, now_ms):
    t = time.gmtime(now_ms // 1000)
    return ['%s:{%s}:m:%s' % (prefix, mailbox, time.strftime('%Y%m%d%H%M', t)),
            '%s:{%s}:d:%s' % (prefix, mailbox, time.strftime('%Y%m%d', t))]


def paced_call(sha, prefix, mailbox, now, mid):
    return ['EVALSHA', sha, 7] + paced_keys(prefix, mailbox) + [
        now, mid, PER_MINUTE, PER_DAY, 1, 0, 0, IN_FLIGHT, LEASE, ALLOWANCE, GRACE]


def fixed_call(sha, prefix, mailbox, now):
    return ['EVALSHA', sha, 2] + fixed_keys(prefix, mailbox, now) + [
        PER_MINUTE, PER_DAY, 1, 60000 - now % 60000, 86400000 - now % 86400000]


def mailbox(i):
    return 'bench%012d@bench.example' % i


def clean(r, prefix):
    cursor = '0'
    while True:
        cursor, keys = r.call('SCAN', cursor, 'MATCH', prefix + ':*', 'COUNT', 10000)
        if keys:
            r.call('UNLINK', *keys)
        if cursor == '0':
            return


def spread(r, algo, sha, prefix, rng):
    now = int(time.time() * 1000)
    picks = rng.sample(range(100000), CALLS)
    if algo == 'paced':
        r.pipe([['HSET', paced_keys(prefix, mailbox(i))[0], 'seeded', 1] for i in range(100000)])
        cmds = [paced_call(sha, prefix, mailbox(i), now, ID) for i in picks]
    else:
        cmds = [fixed_call(sha, prefix, mailbox(i), now) for i in picks]
    reset(r)
    replies = r.pipe(cmds, chunk=1)   # one at a time, as redis-benchmark -c 1 -P 1
    allowed = sum(1 for x in replies if x[0] == 1)
    return summary(r) + ('%d/%d allowed' % (allowed, len(replies)),)


def one(r, algo, sha, prefix, rng):
    now = int(time.time() * 1000)
    if algo == 'paced':
        r.call('HSET', paced_keys(prefix, mailbox(0))[0], 'seeded', 1)
        cmds = [paced_call(sha, prefix, mailbox(0), now, ID)] * CALLS
    else:
        cmds = [fixed_call(sha, prefix, mailbox(0), now)] * CALLS
    reset(r)
    replies = r.pipe(cmds, chunk=1)
    allowed = sum(1 for x in replies if x[0] == 1)
    return summary(r) + ('%d/%d allowed' % (allowed, len(replies)),)


def steady(r, algo, sha, prefix, rng, release_sha, mailboxes=1000, warm_s=120, measure_s=300):
    t0 = (int(time.time()) // 60) * 60000
    events = []   # (time, seq, mailbox, kind, message id, reservation time)
    seq = 0
    for m in range(mailboxes):
        r.call('HSET', paced_keys(prefix, mailbox(m))[0], 'seeded', 1) if algo == 'paced' else None
        heapq.heappush(events, (t0 + int(rng.expovariate(1 / 2600)), seq, m, 'new', None, 0))
        seq += 1
    last = [0] * mailboxes
    end, reset_done, counts = t0 + (warm_s + measure_s) * 1000, False, {}
    while events and events[0][0] < end:
        if not reset_done and events[0][0] >= t0 + warm_s * 1000:
            reset(r)
            reset_done, counts = True, {}
        horizon = events[0][0] + 20
        batch = []
        while events and events[0][0] < horizon:
            batch.append(heapq.heappop(events))
        cmds = []
        for at, _, m, kind, mid, rat in batch:
            at = max(at, last[m])
            last[m] = at
            if kind == 'release':
                cmds.append(['EVAL', release_sha[1], 7] + paced_keys(prefix, mailbox(m)) +
                            [mid, 'done', rat, 1, 0])
            elif algo == 'paced':
                cmds.append(paced_call(sha, prefix, mailbox(m), at, mid or 'new'))
            else:
                cmds.append(fixed_call(sha, prefix, mailbox(m), at))
        ids = []
        for i, (at, s, m, kind, mid, rat) in enumerate(batch):
            if kind == 'new':
                mid = '%08x-%d' % (m, s)
                if algo == 'paced':
                    cmds[i][11] = mid
                heapq.heappush(events, (at + max(1, int(rng.expovariate(1 / 2600))), seq, m,
                                        'new', None, 0))
                seq += 1
            ids.append(mid)
        for (at, _, m, kind, _, _), mid, reply in zip(batch, ids, r.pipe(cmds)):
            at = last[m] if kind != 'release' else at
            if kind == 'release':
                continue
            if reply[0] == 1:
                counts['allowed'] = counts.get('allowed', 0) + 1
                if algo == 'paced':
                    heapq.heappush(events, (at + 300, seq, m, 'release', mid, reply[3]))
                    seq += 1
            else:
                key = 'denied ' + reply[2] + (' (booked send)' if kind == 'again' else '')
                counts[key] = counts.get(key, 0) + 1
                heapq.heappush(events, (at + max(int(reply[1]), 1), seq, m, 'again', mid, 0))
                seq += 1
    us, cmds_per, calls = summary(r)
    rel = stats(r).get('eval', (0, 0.0))
    mem = 0
    for m in range(mailboxes):
        keys = paced_keys(prefix, mailbox(m))[:5] if algo == 'paced' else fixed_keys(prefix, mailbox(m), end)
        for k in keys:
            mem += r.call('MEMORY', 'USAGE', k, 'SAMPLES', 0) or 0
    detail = ', '.join('%s %d' % kv for kv in sorted(counts.items()))
    if algo == 'paced':
        detail += '; release %.2f us/call' % (rel[1] / max(rel[0], 1))
    return us, cmds_per, calls, detail + '; %d bytes/mailbox' % (mem // mailboxes)


def booked_bytes(r, sha, prefix):
    now = int(time.time() * 1000)
    keys = paced_keys(prefix, mailbox(0))[:5]
    r.call('HSET', keys[0], 'seeded', 1)
    r.call(*paced_call(sha, prefix, mailbox(0), now, 'first'))
    size = lambda: sum(r.call('MEMORY', 'USAGE', k, 'SAMPLES', 0) or 0 for k in keys)
    rest = size()
    for i in range(100):
        r.call(*paced_call(sha, prefix, mailbox(0), now, 'booked-%04d-6d61696c-2d77' % i))
    return rest, (size() - rest) / 100


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--rounds', type=int, default=3)
    p.add_argument('--paced', default=os.path.join(ROOT, 'lua/paced/check_and_reserve.lua'))
    p.add_argument('--fixed', default=os.path.join(ROOT, 'lua/fixed_window/check_and_reserve.lua'))
    p.add_argument('--only', default='a,b,c')
    p.add_argument('--no-fixed', action='store_true')
    p.add_argument('--before', help='a second paced script (e.g. `git show REV:lua/paced/check_and_reserve.lua`), measured beside')
    p.add_argument('--calls', type=int, default=30000, help='calls of (a) and (b)')
    p.add_argument('--steady-s', type=int, default=300, help='measured virtual seconds of (c)')
    a = p.parse_args()
    global CALLS
    CALLS = a.calls
    port = random.randint(20000, 40000)
    d = tempfile.mkdtemp(prefix='paced-redis-time-')
    server = subprocess.Popen(['redis-server', '--port', str(port), '--save', '', '--appendonly',
                               'no', '--dir', d], stdout=subprocess.DEVNULL)
    try:
        for _ in range(50):
            try:
                r = Redis(port)
                r.call('PING')
                SERVER['pid'] = server.pid
                break
            except (ConnectionRefusedError, RuntimeError):
                time.sleep(0.1)
        shas = {'paced': r.call('SCRIPT', 'LOAD', open(a.paced).read()),
                'fixed-window': r.call('SCRIPT', 'LOAD', open(a.fixed).read())}
        release_src = open(os.path.join(ROOT, 'lua/paced/release.lua')).read()
        release = (r.call('SCRIPT', 'LOAD', release_src), release_src)
        algos = ['paced'] + ([] if a.no_fixed else ['fixed-window'])
        if a.before:
            shas['paced-before'] = r.call('SCRIPT', 'LOAD', open(a.before).read())
            algos.insert(0, 'paced-before')
        runs = {'a': spread, 'b': one, 'c': lambda *x: steady(*x, release, measure_s=a.steady_s)}
        print('redis-server %s on port %d, load %s' % (r.call('INFO', 'server').split('redis_version:')[1].split()[0],
              port, open('/proc/loadavg').read().split()[:3]))
        results = {}
        for rnd in range(a.rounds):
            for w in a.only.split(','):
                for algo in algos:
                    prefix = 'bench:rt:%d%s%s' % (rnd, w, algo[0])
                    kind = 'fixed-window' if algo == 'fixed-window' else 'paced'
                    res = runs[w](r, kind, shas[algo], prefix, random.Random(23 + rnd))
                    clean(r, prefix)
                    res = res + (SERVER['last_cpu_us'],)
                    results.setdefault((w, algo), []).append(res)
                    print('round %d (%s) %-12s %6.2f us/call (cmdstat)  %6.2f us CPU/call  %5.2f commands/call  %s' %
                          (rnd + 1, w, algo, res[0], res[4], res[1], res[3]), flush=True)
        print('\nmedians (and minima) over %d rounds; workload: paced, fixed-window, paced/fixed-window;'
              ' usec_per_call of cmdstat_evalsha, then the server\'s CPU per call; paced commands/call' % a.rounds)
        med = lambda xs: sorted(xs)[len(xs) // 2]
        for w in a.only.split(','):
            for pname in [x for x in algos if x != 'fixed-window']:
                P, F = results[(w, pname)], results.get((w, 'fixed-window'))
                pc = med([x[1] for x in P])
                line = '(%s) %s' % (w, pname)
                for i, name in ((0, 'cmdstat'), (4, 'CPU')):
                    pm, pn = med([x[i] for x in P]), min(x[i] for x in P)
                    if F:
                        fm, fn = med([x[i] for x in F]), min(x[i] for x in F)
                        line += '  %s %.2f / %.2f = %.2fx (min %.2f / %.2f = %.2fx)' % (name, pm, fm, pm / fm, pn, fn, pn / fn)
                    else:
                        line += '  %s %.2f (min %.2f)' % (name, pm, pn)
                print(line + '  %.2f commands' % pc)
        for algo in algos:
            if algo != 'fixed-window':
                rest, per = booked_bytes(r, shas[algo], 'bench:rt:mem')
                clean(r, 'bench:rt:mem')
                print('%s bytes for one mailbox after one send: %d; per booked message: %.0f' % (algo, rest, per))
    finally:
        server.terminate()
        server.wait()


if __name__ == '__main__':
    sys.exit(main())
