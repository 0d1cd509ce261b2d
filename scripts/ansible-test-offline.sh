#!/usr/bin/env bash
# ansible-test without the internet.
#
#   prepare          put a get-pip stand-in into ansible-test's cache for each pip version the
#                    supported ansible-core releases ask for (2.19: 24.2, 2.20/2.21: 25.2). Each
#                    sanity venv runs it to install pip; it installs pip from the wheel on PyPI.
#   run VENV ARGS..  build the collection, unpack it into a temporary
#                    ansible_collections/dgxops/fleet tree (ansible-test needs that path) with
#                    tests/unit and tests/sanity, and run VENV/bin/ansible-test ARGS there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="$HOME/.ansible/test/cache"
PIP_VERSIONS=(24.2 25.2)

prepare() {
  mkdir -p "$CACHE"
  local v wheel stand_in
  for v in "${PIP_VERSIONS[@]}"; do
    stand_in="$CACHE/get_pip_${v//./_}.py"
    wheel="$CACHE/pip-$v-py3-none-any.whl"
    if [ ! -f "$wheel" ]; then
      "$ROOT/.venv/bin/python" -m pip download -q --no-deps "pip==$v" -d "$CACHE" 2>/dev/null
    fi
    [ -f "$wheel" ] || { echo "ansible-test-offline: could not fetch pip $v from PyPI" >&2; exit 1; }
    cat > "$stand_in" <<PY
# Offline stand-in for get-pip.py (pip $v), written by dgxops scripts/ansible-test-offline.sh.
# get-pip.py installs pip from an embedded wheel; this one uses the wheel from PyPI beside it.
import sys
sys.path.insert(0, "$wheel")
from pip._internal.cli.main import main
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install"] + args))
PY
  done
}

run() {
  local venv="$1"; shift
  local work
  work="$(mktemp -d /tmp/dgxops-ansible-test.XXXXXX)"
  trap 'rm -rf "$work"' RETURN
  local dest="$work/ansible_collections/dgxops/fleet"
  mkdir -p "$dest"
  # Sanity tests the collection as it ships: the artifact `ansible-galaxy collection build`
  # makes (galaxy.yml's build_ignore keeps the dgxops Python package, scripts and tooling out;
  # those are checked by ruff in the lint stage), plus the collection's own tests/unit and
  # tests/sanity. Untracked files are included, so work in progress is checked too.
  "$ROOT/$venv/bin/ansible-galaxy" collection build --force --output-path "$work" "$ROOT" >/dev/null
  tar -C "$dest" -xzf "$work"/dgxops-fleet-*.tar.gz
  mkdir -p "$dest/tests"
  for d in tests/unit tests/sanity; do
    [ -d "$ROOT/$d" ] && cp -r "$ROOT/$d" "$dest/tests/"
  done
  find "$dest" -name __pycache__ -prune -exec rm -rf {} +
  (cd "$dest" && PATH="$ROOT/$venv/bin:$PATH" "$ROOT/$venv/bin/ansible-test" "$@")
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare | run VENV ARGS..." >&2; exit 2 ;;
esac
