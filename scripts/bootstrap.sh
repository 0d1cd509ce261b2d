#!/usr/bin/env bash
# Set up everything this project needs, from a machine with only Python, pip and apt.
# Idempotent: each step is skipped when its inputs have not changed.
#
#   .venv       Python 3.13 (3.12 accepted): ansible-core 2.21 + lint/test/runner toolchain
#   .venv-219   Python 3.11: ansible-core 2.19, for the second sanity/unit check
#   collections ansible.posix, community.general, community.docker: Galaxy is unreachable,
#               so they are extracted from the `ansible` package on PyPI (requirements-collections.txt)
#   Docker      Debian's docker.io; dockerd is started when no engine answers
#   image       the simulated DGX node image (debootstrap + docker import; skipped when unchanged)
#
# Usage: scripts/bootstrap.sh [--no-image] [--no-219]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WANT_IMAGE=1
WANT_219=1
for arg in "$@"; do
  case "$arg" in
    --no-image) WANT_IMAGE=0 ;;
    --no-219) WANT_219=0 ;;
    *) echo "bootstrap: unknown option $arg" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*"; }
die() { printf '[bootstrap] ERROR: %s\n' "$*" >&2; exit 1; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }
# pip on these machines warns about configured local indexes that do not exist: keep the noise out
pipq() { "$@" 2> >(grep -v "^WARNING: Location 'file://" >&2); }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; fi
fi

# --- 1. Debian packages -------------------------------------------------------------
APT_PKGS=(docker.io debootstrap openmpi-bin dpkg-dev prometheus chromium gcc libc6-dev)   # consumers: ompi_info, stand-in apt repos (dpkg-dev), promtool + prometheus; the HTML report in headless Chromium; the simulated nodes' libcuda stand-in (gcc)
command -v java >/dev/null 2>&1 || APT_PKGS+=(openjdk-17-jre-headless)   # pyspark consumer test
command -v findmnt >/dev/null 2>&1 || APT_PKGS+=(util-linux)
missing=()
for p in "${APT_PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    die "need root (or passwordless sudo) to install: ${missing[*]}"
  fi
  say "apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- 2. Python 3.13 (3.12) controller venv -----------------------------------------
find_python() {
  local v c
  for v in 3.13 3.12; do
    for c in "$HOME"/.pyenv/versions/"$v".*/bin/"python$v" /usr/local/bin/"python$v" /usr/bin/"python$v"; do
      [ -x "$c" ] && "$c" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null && { echo "$c"; return 0; }
    done
  done
  return 1
}
PY313="$(find_python)" || die "no Python 3.12+ found (ansible-core 2.21 needs it); pyenv install 3.13 or apt-get install python3.12"
REQ_HASH="$(cat requirements.txt requirements-consumers.txt pyproject.toml requirements-collections.txt | sha256sum | cut -c1-16)"
if ! stamp_ok .venv/.dgxops-stamp "$REQ_HASH"; then
  say "creating .venv with $("$PY313" --version 2>&1)"
  [ -x .venv/bin/python ] || "$PY313" -m venv .venv
  pipq .venv/bin/python -m pip install -q --upgrade pip
  pipq .venv/bin/python -m pip install -q -r requirements.txt -r requirements-consumers.txt
  pipq .venv/bin/python -m pip install -q --no-deps -e .
  echo "$REQ_HASH" > .venv/.dgxops-stamp
fi
# community.docker's connection runs the first `docker` on PATH; /usr/local/bin/docker may be
# another client, so the engine's own CLI goes into the venv's bin.
[ -x /usr/bin/docker ] && ln -sf /usr/bin/docker .venv/bin/docker

# --- 3. Collections from the `ansible` package on PyPI (Galaxy is unreachable) -------
install_collections() {  # venv, ansible package spec
  local venv="$1" spec="$2" site
  site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  local want="$spec $(grep -v '^#' requirements-collections.txt | tr '\n' ' ')"
  stamp_ok "$site/ansible_collections/.dgxops-stamp" "$want" && return 0
  say "extracting collections from $spec into $venv"
  mkdir -p .cache/wheels
  "$venv/bin/python" -m pip download -q --no-deps "$spec" -d .cache/wheels 2>/dev/null
  local wheel
  wheel="$(ls -t .cache/wheels/ansible-"${spec#ansible==}"-py3-none-any.whl | head -1)"
  "$venv/bin/python" - "$wheel" "$site" requirements-collections.txt <<'PY'
import sys, zipfile
wheel, site, listfile = sys.argv[1:]
wanted = [l.strip() for l in open(listfile) if l.strip() and not l.startswith("#")]
prefixes = ["ansible_collections/%s/" % w.replace(".", "/") for w in wanted]
with zipfile.ZipFile(wheel) as zf:
    members = [m for m in zf.namelist() if any(m.startswith(p) for p in prefixes)]
    for p in prefixes:
        if not any(m.startswith(p) for m in members):
            sys.exit("collection %s not found in %s" % (p, wheel))
    zf.extractall(site, members)
print("  %d files from %s" % (len(members), ", ".join(wanted)))
PY
  echo "$want" > "$site/ansible_collections/.dgxops-stamp"
}
install_collections .venv "ansible==14.5.0"

# --- 4. Python 3.11 venv with ansible-core 2.19 (second, lighter check) -------------
if [ "$WANT_219" = 1 ]; then
  PY311=""
  for c in "$HOME"/.pyenv/versions/3.11*/bin/python3.11 /usr/local/bin/python3.11 /usr/bin/python3.11; do
    if [ -x "$c" ] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null; then PY311="$c"; break; fi
  done
  [ -n "$PY311" ] || die "no Python 3.11 found for the ansible-core 2.19 check"
  H219="$(sha256sum requirements-219.txt | cut -c1-16)"
  if ! stamp_ok .venv-219/.dgxops-stamp "$H219"; then
    say "creating .venv-219 with $("$PY311" --version 2>&1)"
    [ -x .venv-219/bin/python ] || "$PY311" -m venv .venv-219
    pipq .venv-219/bin/python -m pip install -q --upgrade pip
    pipq .venv-219/bin/python -m pip install -q -r requirements-219.txt
    echo "$H219" > .venv-219/.dgxops-stamp
  fi
  install_collections .venv-219 "ansible==12.3.0"
fi

# --- 5. ansible-test sanity offline --------------------------------------------------
# Each sanity venv bootstraps pip from a get-pip URL that cannot be reached here; a stand-in
# that installs pip from the wheel on PyPI makes them work offline.
scripts/ansible-test-offline.sh prepare

# --- 6. Docker engine ------------------------------------------------------------------
if ! /usr/bin/docker info >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
    die "no Docker engine answers and starting dockerd needs root"
  fi
  say "starting dockerd (log: /var/log/dgxops-dockerd.log)"
  $SUDO sh -c 'nohup dockerd >/var/log/dgxops-dockerd.log 2>&1 &'
  for _ in $(seq 60); do /usr/bin/docker info >/dev/null 2>&1 && break; sleep 1; done
  /usr/bin/docker info >/dev/null 2>&1 || die "dockerd did not come up: see /var/log/dgxops-dockerd.log"
fi

# Each simulated node runs systemd, which takes several inotify instances; the kernel's
# default of 128 per user stops a fleet of about 25 nodes from booting (the benchmark's 32).
inotify_limit=$(cat /proc/sys/fs/inotify/max_user_instances 2>/dev/null || echo 1024)
if [ "$inotify_limit" -lt 1024 ]; then
  if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
    say "raising fs.inotify.max_user_instances from $inotify_limit to 1024 (systemd in each simulated node)"
    $SUDO sysctl -qw fs.inotify.max_user_instances=1024 || say "could not raise it: fleets above ~25 nodes may not boot"
  else
    say "fs.inotify.max_user_instances is $inotify_limit: fleets above ~25 nodes may not boot (raise it to 1024 as root)"
  fi
fi

# --- 7. Simulated node image ------------------------------------------------------------
if [ "$WANT_IMAGE" = 1 ]; then
  .venv/bin/python -m dgxops.sim.image
fi
say "ready"
