#!/usr/bin/env bash
# Run every check of the project; set up whatever is missing first (scripts/bootstrap.sh).
#   scripts/test.sh                 all stages: lint sanity unit molecule
#   scripts/test.sh unit molecule   only the named stages
# Exits non-zero when any stage fails; prints one line per stage at the end.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
stages=("$@")
[ "${#stages[@]}" -gt 0 ] || stages=(lint sanity unit molecule)

scripts/bootstrap.sh || { echo "test: setup failed"; exit 1; }
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_CONFIG="$ROOT/ansible.cfg"

declare -A result
declare -A took
run_stage() {
  local name="$1"; shift
  local start=$(date +%s)
  echo
  echo "################ $name"
  if "$@"; then result[$name]=passed; else result[$name]=FAILED; fi
  took[$name]=$(( $(date +%s) - start ))
}

pytest_ok() {  # pytest exits 5 when it collects nothing: that is a failure here too
  "$@"; local rc=$?
  [ "$rc" -eq 5 ] && echo "pytest collected no tests"
  return "$rc"
}

for stage in "${stages[@]}"; do
  case "$stage" in
    lint)
      run_stage "ansible-lint (production)" ansible-lint --offline
      run_stage "ruff (dgxops package, tests, benchmarks)" ruff check src tests benchmarks
      run_stage "yamllint (whole tree)" yamllint --strict .
      run_stage "antsibull-changelog lint" antsibull-changelog lint
      run_stage "role READMEs (scripts/gen_role_docs.py --check)" .venv/bin/python scripts/gen_role_docs.py --check
      ;;
    sanity)
      run_stage "sanity ansible-core 2.21 / py3.13" scripts/ansible-test-offline.sh run .venv sanity --python 3.13
      run_stage "sanity ansible-core 2.19 / py3.11" scripts/ansible-test-offline.sh run .venv-219 sanity --python 3.11
      ;;
    unit)
      run_stage "pytest (py3.13, ansible-core 2.21)" pytest_ok .venv/bin/python -m pytest -q -p no:cacheprovider
      run_stage "pytest units (py3.11, ansible-core 2.19)" pytest_ok .venv-219/bin/python -m pytest -q -p no:cacheprovider tests/unit tests/sim
      ;;
    molecule)
      run_stage "molecule (all scenarios)" scripts/molecule.sh
      ;;
    *) echo "test: unknown stage $stage (lint, sanity, unit, molecule)"; exit 2 ;;
  esac
done

echo
echo "################ summary"
rc=0
npass=0
nfail=0
for name in "${!result[@]}"; do
  printf '%-45s %-7s %5ss\n' "$name" "${result[$name]}" "${took[$name]}"
  if [ "${result[$name]}" = passed ]; then npass=$((npass + 1)); else nfail=$((nfail + 1)); rc=1; fi
done
[ "$rc" -eq 0 ] && echo "all stages passed" || echo "some stages FAILED"
echo "stages: $npass passed, $nfail failed"
exit "$rc"
