#!/usr/bin/env bash
# Run molecule scenarios of the collection against simulated DGX nodes.
#   scripts/molecule.sh              every scenario under extensions/molecule/
#   scripts/molecule.sh NAME [...]   the named scenarios
# Extra molecule arguments after `--`, e.g. scripts/molecule.sh nccl -- converge
# Runs are serialised with a lock: the machine has 2 cores.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
scripts/bootstrap.sh --no-219 >/dev/null
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"

scenarios=()
action=(test)
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; action=("$@"); break ;;
    *) scenarios+=("$1"); shift ;;
  esac
done
if [ "${#scenarios[@]}" -eq 0 ]; then
  for f in extensions/molecule/*/molecule.yml; do
    d="$(basename "$(dirname "$f")")"
    [ "$d" = shared ] || scenarios+=("$d")
  done
fi

exec 9>/tmp/dgxops-molecule.lock
flock 9
failed=()
for s in "${scenarios[@]}"; do
  echo "=== molecule ${action[*]} -s $s"
  start=$(date +%s)
  if molecule "${action[@]}" -s "$s"; then
    echo "=== $s: passed in $(( $(date +%s) - start )) s"
  else
    echo "=== $s: FAILED after $(( $(date +%s) - start )) s"
    failed+=("$s")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "molecule: ${#failed[@]} of ${#scenarios[@]} scenario(s) failed: ${failed[*]}"
  exit 1
fi
echo "molecule: ${#scenarios[@]} scenario(s) passed"
