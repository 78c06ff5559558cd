#!/usr/bin/env bash
# The release image's runtime, proven without a container engine (none can run on these
# machines: no daemon, no registry reachable; docs/decisions/0043-release-image-and-upgrades.md).
#
# Builds the release binary as the Dockerfile's `build` stage does (or takes BIN=path), then makes
# a root holding what the `runtime` + `release` stages hold for it: the binary in
# /usr/local/bin, its shared libraries and the dynamic loader (ldd), each checked to come from a
# package debian:bookworm-slim already holds (an Essential package or one they depend on), the CA bundle of
# ca-certificates (the one package the runtime stage adds), /etc/passwd and /etc/group with user
# and group 10001. In it — mounted read-only, as 10001:10001, no shell, no /proc — it runs
# `--version`, `migrate`, then `run` against the local PostgreSQL and Redis until the
# HEALTHCHECK's command (`mail-worker probe --path /healthz`) answers, then stops it with TERM
# and expects exit 0. Prints the root's size. Needs root (chroot, a mount namespace).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${BIN:-}" ]; then
  cargo build --release --locked -p mail-worker --bin mail-worker
  BIN=target/release/mail-worker
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/mail-worker-root.XXXXXX")"
db="mw_image_root_$$"
base_url="${IMAGE_ROOT_DATABASE:-postgres://postgres@127.0.0.1:5432}"
cleanup() {
  [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
  psql "$base_url/postgres" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
root="$work/root"
mkdir -p "$root/usr/local/bin" "$root/etc/ssl/certs" "$root/tmp"
install -m 0755 "$BIN" "$root/usr/local/bin/mail-worker"

# The shared libraries (and the loader), each from a package the base image holds: Debian's
# Essential packages (what debian:bookworm-slim is made of) and what they depend on.
libs=$(ldd "$BIN" | awk '/=> \//{print $3} /^\s*\/lib/{print $1}' | sort -u)
[ -n "$libs" ] || { echo "image-root: ldd found no libraries in $BIN" >&2; exit 1; }
if ldd "$BIN" | grep -q 'not found'; then ldd "$BIN" >&2; exit 1; fi
deps_of() { dpkg-query -W -f='${Pre-Depends}, ${Depends}\n' "$@" 2>/dev/null | tr ',|' '\n\n' | sed 's/(.*//; s/:any//; s/ //g' | grep -v '^$' | sort -u; }
base=$(dpkg-query -W -f='${Essential} ${Package}\n' | awk '$1 == "yes" {print $2}' | sort -u)
while :; do
  more=$(printf '%s\n%s\n' "$base" "$(deps_of $base)" | sort -u)
  [ "$more" = "$base" ] && break
  base=$more
done
for lib in $libs; do
  real=$(readlink -f "$lib")
  pkg=$(dpkg -S "$real" 2>/dev/null | head -1 | cut -d: -f1) || true
  [ -n "$pkg" ] || pkg=$(dpkg -S "$lib" | head -1 | cut -d: -f1)
  grep -qx "$pkg" <<<"$base" || { echo "image-root: $lib comes from $pkg, which debian:bookworm-slim does not hold" >&2; exit 1; }
  echo "image-root: $lib ($pkg)"
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done
# The CA bundle ca-certificates writes (rustls-native-certs reads it: rediss://).
dpkg-query -W ca-certificates >/dev/null
cp -L /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nmailworker:x:10001:10001::/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
printf 'root:x:0:\nmailworker:x:10001:\n' >"$root/etc/group"
echo "image-root: the root holds $(du -sh --apparent-size "$root" | cut -f1) (mail-worker $(du -h --apparent-size "$root/usr/local/bin/mail-worker" | cut -f1))"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Only these variables reach the binary.
run_env=(DATABASE_URL="$base_url/$db" REDIS_URL="${IMAGE_ROOT_REDIS:-redis://127.0.0.1:6379}"
  METRICS_LISTEN="127.0.0.1:$port" MAIL_RATE_LIMIT_KEY_PREFIX="image-root:$$:" INTAKE_QUEUE="image-root:$$"
  LOG_FORMAT=json)
# A mount namespace of its own: the root bind-mounted read-only, the command as 10001:10001
# (its pid, kept by exec, written to $work/pid.$1).
inside() {
  env -i "${run_env[@]}" unshare --mount --fork -- sh -c '
    root=$1 work=$2; shift 2
    mount --bind "$root" "$root" && mount -o remount,bind,ro "$root" || exit 1
    echo $$ >"$work/pid.$1"
    exec chroot --userspec=10001:10001 "$root" /usr/local/bin/mail-worker "$@"' sh "$root" "$work" "$@"
}
inside --version
inside migrate >"$work/migrate.log" 2>&1 || { cat "$work/migrate.log" >&2; exit 1; }
inside run >"$work/run.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  inside probe --path /healthz >"$work/probe.out" 2>&1 && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/run.log" >&2; echo "image-root: run exited" >&2; exit 1; }
  sleep 0.2
done
cat "$work/probe.out"
grep -q '^200' "$work/probe.out" || { cat "$work/run.log" >&2; exit 1; }
grep -o '"event":"daemon.started".*' "$work/run.log" | head -1
# The daemon was refused nothing (a read-only root, no home): no error line.
if grep '"level":"ERROR"' "$work/run.log"; then exit 1; fi
kill -TERM "$(cat "$work/pid.run")"
wait "$pid" || { cat "$work/run.log" >&2; echo "image-root: run did not exit 0 after TERM" >&2; exit 1; }
pid=
echo "image-root: ok (user 10001:10001, read-only root, the CA bundle, $(echo "$libs" | wc -w) shared libraries)"
