#!/usr/bin/env bash
# Makes sure headless Chromium and its WebDriver (chromedriver) are installed, for the admin
# UI's browser test (tests/browser.rs). Idempotent like scripts/services.sh: installs Debian's
# `chromium` and `chromium-driver` if missing (needs root). Prints what it did.
set -euo pipefail

say() { printf 'browser: %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  say "Chromium $(chromium --version 2>/dev/null | awk '{print $2}') and chromedriver already installed"
else
  say "installing chromium and chromium-driver from Debian's packages"
  # Another apt-get (a second CI run, unattended upgrades) may hold dpkg's lock: wait for it.
  lock=(-o DPkg::Lock::Timeout=600)
  as_root apt-get "${lock[@]}" update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq chromium chromium-driver >/dev/null
  say "installed $(chromium --version 2>/dev/null)"
fi
