#!/usr/bin/env bash
# Capture READ-ONLY nvidia-smi output from a real GPU machine, in the same
# "# $ nvidia-smi ..." section format as tests/fixtures/nvidia-smi/public/.
# Queries only: this script never runs a setter (-pm -pl -ac -rac -lgc -rgc -c -e -r -mig,
# mig -cgi/-dgi/-cci/-dci).  Usage: capture_real.sh OUTFILE
out=${1:?usage: capture_real.sh OUTFILE}
case "$out" in
  -*) echo "usage: capture_real.sh OUTFILE (got option $out: is something running this as an inventory script?)" >&2; exit 2 ;;
esac
export LC_ALL=C
sec() {
  { echo "################################################################################"
    echo "# $ nvidia-smi $*"
    echo "################################################################################"
    nvidia-smi "$@" 2>&1; echo "# rc=$?"; echo; echo; } >>"$out"
}
: >"$out"
{ echo "collected_at:   $(date -u +%FT%TZ)"; echo "kernel:         $(uname -r)"; echo "arch:           $(uname -m)"
  head -1 /proc/driver/nvidia/version; echo; } >>"$out"
fields=$(nvidia-smi --help-query-gpu | sed -n 's/^"\([a-z][A-Za-z0-9_.]*\)".*/\1/p' | paste -sd,)
sec --version
sec -h
sec --help-query-gpu
sec --help-query-compute-apps
sec -L
sec topo -m
sec
sec -q
sec -q -x
sec -q -d SUPPORTED_CLOCKS
sec -q -d POWER
sec -q -d CLOCK
sec -q -d PERFORMANCE
sec --query-gpu="$fields" --format=csv
sec --query-gpu="$fields" --format=csv,noheader,nounits
sec --query-gpu=gpu_name,clocks.gr,clocks.mem,clocks_throttle_reasons.active,gpu.power.requested_limit,inforom.image --format=csv
sec --query-gpu=index,name,power.limit,mig.mode.current --format=csv
sec --query-gpu=index,name,power.limit,mig.mode.current --format=csv,nounits
sec --query-compute-apps=timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory --format=csv
sec --query-compute-apps=pid,used_memory --format=csv,noheader
sec mig -lgip
sec mig -lgipp
sec mig -lgi
sec mig -lci
sec mig -lcip
sec mig -lgip -i 0
sec mig -lcip -gi 0
sec -i 7 --query-gpu=index --format=csv
sec -i GPU-00000000-0000-0000-0000-000000000000 --query-gpu=index --format=csv
sec --query-gpu=index,bogus.field --format=csv
sec --query-gpu=index --format=json
sec --query-gpu=index
sec --query-gpu=index --format=csv,bogus
sec --bogus-flag
sec topo -m -i 0
sec -q -x -d POWER
bid=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1)
sec -i "$bid" --query-gpu=index,pci.bus_id --format=csv
sec -i 0,7 --query-gpu=index --format=csv
sec -L -i 0
