#!/usr/bin/env bash
# The main job on its embedded default, the simulated fleet: set everything up, start the
# simulated DGX nodes, show them, and run site.yml against them (twice: the second run must
# change nothing).
#   scripts/demo.sh            fleet "dgxsim" with the default layout
#   DGXOPS_LAYOUT=dgx-h100=4 scripts/demo.sh
#   scripts/demo.sh --down     remove the simulated fleet again
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ "${1:-}" = "--down" ]; then
  exec .venv/bin/dgxops sim down --fleet dgxsim
fi
scripts/bootstrap.sh --no-219
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"
dgxops sim up --fleet dgxsim --layout "${DGXOPS_LAYOUT:-dgx-h100=2,dgx-h200=1,dgx-a100-80gb=1,dgx-spark=1}" \
  --inventory inventories/simulated/hosts.yml
echo
echo "== ansible-playbook site.yml (first run: applies the settings)"
ansible-playbook -i inventories/simulated/hosts.yml site.yml
echo
echo "== ansible-playbook site.yml (second run: must report changed=0 everywhere)"
ansible-playbook -i inventories/simulated/hosts.yml site.yml | tee /tmp/dgxops-demo-second.log
if grep -Eq 'changed=[1-9]' /tmp/dgxops-demo-second.log; then
  echo "demo: the second run changed something: not idempotent" >&2
  exit 1
fi
echo
echo "The simulated fleet keeps running: scripts/demo.sh --down removes it."
