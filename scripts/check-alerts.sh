#!/usr/bin/env bash
# The Prometheus alerting rules (deploy/prometheus/alerts.yaml): syntax and unit tests with
# promtool, from Debian's prometheus package when it is not installed.
set -euo pipefail
cd "$(dirname "$0")/../deploy/prometheus"
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v promtool >/dev/null; then
  echo "alerts: installing promtool (Debian's prometheus package)"
  lock=(-o DPkg::Lock::Timeout=600)
  as_root apt-get "${lock[@]}" update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -qq --no-install-recommends prometheus >/dev/null
  # The package starts a server where it can; CI needs only promtool.
  pkill -x prometheus 2>/dev/null || true
fi
promtool check rules alerts.yaml
promtool test rules alerts.test.yaml
