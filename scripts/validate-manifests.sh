#!/usr/bin/env bash
# Validates deploy/kubernetes/*.yaml against the Kubernetes API schemas with
# kubernetes-validate (PyPI; its schemas ship inside the package, so no download at run time),
# strict: unknown fields are errors. The ServiceMonitor (a CRD) has no bundled schema: warned,
# not failed. Every file is validated (the examples too: secret.example.yaml,
# ingress.example.yaml), and, where kubectl is installed, what `kubectl kustomize` renders from
# kustomization.yaml (the generated senders ConfigMap and its hashed name included). tests/it/deploy.rs
# checks the same files against the daemon's own contracts.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${KUBE_VALIDATE_VENV:-${TMPDIR:-/tmp}/mail-worker-kube-validate}"
if [ ! -x "$venv/bin/kubernetes-validate" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet kubernetes-validate
fi
files=()
for f in deploy/kubernetes/*.yaml; do
  [ "$(basename "$f")" = kustomization.yaml ] || files+=("$f")
done
"$venv/bin/kubernetes-validate" --strict "${files[@]}"
if command -v kubectl >/dev/null; then
  rendered="$(mktemp --suffix=.yaml)"
  trap 'rm -f "$rendered"' EXIT
  kubectl kustomize deploy/kubernetes >"$rendered"
  echo "validate-manifests: kubectl kustomize deploy/kubernetes renders $(grep -c '^kind:' "$rendered") objects"
  "$venv/bin/kubernetes-validate" --strict "$rendered"
else
  echo "validate-manifests: no kubectl, the kustomize render is not checked"
fi
