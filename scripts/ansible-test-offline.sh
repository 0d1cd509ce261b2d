#!/usr/bin/env bash
# ansible-test without the internet.
#
#   prepare          put a get-pip stand-in into ansible-test's cache for each pip version the
#                    supported ansible-core releases ask for (2.19: 24.2, 2.20/2.21: 25.2). Each
#                    sanity venv runs it to install pip; it installs pip from the wheel on PyPI.
#   run VENV ARGS..  copy the collection into a temporary ansible_collections/dgxops/fleet tree
#                    (ansible-test needs that path; the checkout itself is not under it) and run
#                    VENV/bin/ansible-test ARGS there.
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
  # only what git tracks or would track (untracked, not ignored), minus tooling that is not
  # collection content; the symlink back to the checkout stays out (it would loop).
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard \
     | grep -zv -e '^\.collections/' -e '^\.ci/' \
     | xargs -0 -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' \
     | tar --null -T - -cf -) | tar -C "$dest" -xf -
  (cd "$dest" && PATH="$ROOT/$venv/bin:$PATH" "$ROOT/$venv/bin/ansible-test" "$@")
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: $0 prepare | run VENV ARGS..." >&2; exit 2 ;;
esac
