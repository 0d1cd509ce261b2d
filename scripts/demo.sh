#!/usr/bin/env bash
# The main job on its embedded default, the simulated fleet: set everything up from nothing,
# start a small simulated DGX fleet (2 x DGX A100, 1 x DGX H100, 1 x DGX Spark), run the whole
# site.yml through the dgxops wrapper (every area, the driver included: nodes whose driver
# settings change reboot for real and come back with the driver loaded), run it again to show
# that nothing changes, check that every group of nodes is consistent, and print the fleet report.
#   scripts/demo.sh                                  the default fleet "dgxsim"
#   DGXOPS_LAYOUT=dgx-h200=4,dgx-spark=2 scripts/demo.sh
#   scripts/demo.sh --down                           remove the simulated fleet
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
case "$#:${1:-}" in
  0:) ;;
  1:--down) exec .venv/bin/dgxops sim down --fleet dgxsim ;;
  *) echo "usage: scripts/demo.sh [--down]   (got: $*)" >&2; exit 2 ;;
esac
scripts/bootstrap.sh --no-219
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"
OUT="$ROOT/.cache/demo"
mkdir -p "$OUT"

echo; echo "== simulated fleet"
# inventories/simulated/hosts.yml is generated here (not tracked): the nodes of the layout,
# beside the tracked group_vars/host_vars. Without DGXOPS_LAYOUT: the default layout of
# `dgxops sim up` (src/dgxops/sim/fleet.py DEFAULT_LAYOUT).
layout=()
[ -z "${DGXOPS_LAYOUT:-}" ] || layout=(--layout "$DGXOPS_LAYOUT")
dgxops sim up --fleet dgxsim "${layout[@]}" --inventory inventories/simulated/hosts.yml

echo; echo "== site.yml, first run: applies the settings"
dgxops run site.yml -i inventories/simulated/hosts.yml --save "$OUT/first.json"

echo; echo "== site.yml, second run: must change nothing"
dgxops run site.yml -i inventories/simulated/hosts.yml --save "$OUT/second.json" --quiet
python3 - "$OUT/second.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
changed = {h: s["changed"] for h, s in run["hosts"].items() if s["changed"]}
if changed or not run["ok"]:
    sys.exit("demo: the second run is not clean: %s" % (changed or run["failures"]))
print("second run: changed=0 on all %d hosts" % len(run["hosts"]))
PY

echo; echo "== fleet consistency (guide 001 section 4.2: same driver, NCCL, topology per group)"
dgxops consistency -i inventories/simulated/hosts.yml -q --strict --save "$OUT/consistency.json"

echo; echo "== fleet report (also written to .cache/demo/report.html)"
dgxops report -i inventories/simulated/hosts.yml -q --html "$OUT/report.html" \
  --run "first converge=$OUT/first.json" --run "idempotent rerun=$OUT/second.json" \
  --consistency "$OUT/consistency.json"
echo
echo "The simulated fleet keeps running (dgxops sim ls); scripts/demo.sh --down removes it."
