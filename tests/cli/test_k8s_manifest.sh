#!/usr/bin/env bash
# The Kubernetes manifest (deploy/k8s/scaletrain.yaml, issue 17): every resource
# validates against the Kubernetes schemas (PyPI's kubernetes-validate,
# --strict: an unknown or misspelt field fails), and its pieces agree: the
# workers' replicas, the hostfile's lines, mpirun's -np and the layout's dp.
# Usage: test_k8s_manifest.sh PATH/TO/scaletrain REPO_ROOT
. "$(dirname "$0")/lib.sh"
st_cli_init "$@"
command -v kubernetes-validate >/dev/null ||
  { echo "SKIP: kubernetes-validate not found (python3 -m pip install kubernetes-validate)"; exit 0; }
manifest="$root/deploy/k8s/scaletrain.yaml"

kubernetes-validate --strict --quiet "$manifest" >"$work/out" 2>&1 && pass=$((pass + 1)) ||
  fail "kubernetes-validate: $(cat "$work/out")"

# The check itself must be able to fail: a misspelt field.
sed 's/^  replicas: /  replicaz: /' "$manifest" >"$work/bad.yaml"
kubernetes-validate --strict --quiet "$work/bad.yaml" >"$work/bad.out" 2>&1 &&
  fail "a misspelt field validated" || pass=$((pass + 1))

# The pieces agree (read with a YAML-free scan: the file's own layout).
replicas=$(awk '/^kind: StatefulSet/{s=1} s && /^  replicas:/{print $2; exit}' "$manifest")
hosts=$(grep -c '^    scaletrain-worker-[0-9]*\.scaletrain-workers slots=1$' "$manifest")
np=$(awk '/- -np/{getline; gsub(/[^0-9]/, ""); print; exit}' "$manifest")
dp=$(grep -o 'parallel.dp=[0-9]*' "$manifest" | cut -d= -f2)
[ -n "$replicas" ] && [ "$replicas" = "$hosts" ] && [ "$hosts" = "$np" ] && [ "$np" = "$dp" ] &&
  pass=$((pass + 1)) || fail "replicas $replicas, hostfile lines $hosts, -np $np, dp $dp disagree"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
