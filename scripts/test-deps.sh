#!/usr/bin/env bash
# The tests' Python packages, installed at setup (never while `cargo test` runs, so the tests
# pass with the network cut after this step): a venv at target/test-venv with
#   - redis            (examples/producers/python/requirements.txt: the producer test)
#   - standardwebhooks (tests/webhooks/requirements.txt: the outbox's reference receivers)
#   - openapi-spec-validator (tests/ingest/requirements.txt: the ingest's OpenAPI description)
# and, where Node is installed, npm's standardwebhooks (tests/webhooks/package.json) in
# target/test-node. Idempotent: does nothing when they are there. scripts/services.sh runs it.
# TEST_VENV overrides the venv's place (the tests read the same variable).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'test-deps: %s\n' "$*"; }
venv="${TEST_VENV:-target/test-venv}"
imports() { "$1/bin/python" -c 'import redis, standardwebhooks, openapi_spec_validator' 2>/dev/null; }

node_deps() {
  command -v node >/dev/null && command -v npm >/dev/null || { say "no Node: the npm receiver is left out"; return 0; }
  local dir=target/test-node
  if [ -f "$dir/node_modules/standardwebhooks/package.json" ] && cmp -s tests/webhooks/package.json "$dir/package.json"; then
    say "$dir has standardwebhooks"; return 0
  fi
  mkdir -p "$dir"
  cp tests/webhooks/package.json "$dir/package.json"
  npm install --prefix "$dir" --no-audit --no-fund --silent
  say "$dir ready: standardwebhooks $(node -p "require('./$dir/node_modules/standardwebhooks/package.json').version")"
}

if [ -x "$venv/bin/python" ] && imports "$venv"; then
  say "$venv has redis, standardwebhooks and openapi-spec-validator"
  node_deps
  exit 0
fi
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  say "installing python3-venv from Debian's packages"
  as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
  as_root apt-get -o DPkg::Lock::Timeout=600 update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq python3-venv >/dev/null
fi
# Built aside and renamed, so a run cut short never leaves a venv without its packages.
mkdir -p "$(dirname "$venv")"
building="$venv.building.$$"
rm -rf "$building"
python3 -m venv "$building"
"$building/bin/pip" install --quiet --disable-pip-version-check \
  -r examples/producers/python/requirements.txt -r tests/webhooks/requirements.txt \
  -r tests/ingest/requirements.txt
imports "$building"
rm -rf "$venv"
mv "$building" "$venv"
say "$venv ready: $("$venv/bin/python" -c 'import importlib.metadata as m; print("redis", m.version("redis"), "standardwebhooks", m.version("standardwebhooks"), "openapi-spec-validator", m.version("openapi-spec-validator"))')"
node_deps
