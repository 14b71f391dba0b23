#!/usr/bin/env bash
# The Kubernetes manifest (deploy/k8s/scaletrain.yaml, issue 17): every resource
# validates against the Kubernetes schemas (PyPI's kubernetes-validate,
# --strict: an unknown or misspelt field fails), and its pieces agree: the
# workers' replicas and the hostfile's lines; the launcher Job runs
# `scaletrain launch` (SIGTERM becomes a checkpoint) over that hostfile with
# the ConfigMap's mpirun options, which `scaletrain launch` reads back into
# an mpirun command line with -np and --host from the hostfile and the
# layout's dp.
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
[ -n "$replicas" ] && [ "$replicas" = "$hosts" ] &&
  pass=$((pass + 1)) || fail "replicas $replicas, hostfile lines $hosts disagree"

# The launcher's command, run against the ConfigMap's files with a stand-in
# mpirun that prints what it was asked to run: -np from the hostfile, dp set.
mkdir -p "$work/etc"
awk '/^  hostfile: \|/{f=1; next} f && /^    /{sub(/^    /, ""); print; next} f{exit}' "$manifest" >"$work/etc/hostfile"
awk '/^  mpirun.args: \|/{f=1; next} f && /^    /{sub(/^    /, ""); print; next} f{exit}' "$manifest" >"$work/etc/mpirun.args"
mapfile -t cmd < <(awk '/name: launcher/{f=1} f && /command:/{c=1; next} c && /^            - /{sub(/^            - /, ""); print; next} c{exit}' "$manifest")
printf '#!/bin/sh\necho "$@" >"%s/mpirun.called"\n' "$work" >"$work/mpirun"
chmod +x "$work/mpirun"
args=()
for a in "${cmd[@]:1}"; do
  a=${a//\/etc\/scaletrain/$work/etc}
  a=${a/#\/shared\/configs\/my_model.toml/$root/configs/shakespeare_char.toml}
  args+=("${a/#\/shared\/runs/$work/runs}")
done
# (The example config's batch of 32 in micro-batches of 16 fits dp 2 at most; the user's
# my_model.toml is a placeholder: micro-batches of 8 let all four workers run.)
"$bin" "${args[0]}" --mpirun "$work/mpirun" "${args[@]:1}" --set training.micro_batch_size=8 >"$work/launch.out" 2>&1
called=$(cat "$work/mpirun.called" 2>/dev/null)
if [ "${cmd[0]}" = scaletrain ] && [ "${cmd[1]}" = launch ] &&
  echo "$called" | grep -q -- "--bind-to none --mca plm_rsh_agent /etc/scaletrain/kubexec.sh --mca btl tcp,self -np $hosts --host " &&
  echo "$called" | grep -q -- "--set parallel.dp=$hosts --resume auto"; then
  pass=$((pass + 1))
else
  fail "the launcher's command: $(cat "$work/launch.out"); mpirun was asked: $called"
fi

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]
