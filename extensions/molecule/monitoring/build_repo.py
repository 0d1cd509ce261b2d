#!/usr/bin/env python3
"""Build two flat apt repositories of stand-in monitoring packages for the monitoring scenario.

OUTDIR/nvidia/  (stands in for NVIDIA's CUDA repository)
  datacenter-gpu-manager-4-core, datacenter-gpu-manager-4-proprietary at 1:4.4.1-1 and 1:4.4.2-1
  (the proprietary one depends on the core at the same version, as upstream), the core shipping
  a nvidia-dcgm.service; datacenter-gpu-manager-exporter 4.4.1-4.5.2-1 with /usr/bin/dcgm-exporter
  and nvidia-dcgm-exporter.service.
OUTDIR/debian/  (stands in for the distribution)
  prometheus-node-exporter 1.5.0-1+b6 with /usr/bin/prometheus-node-exporter and its unit
  (ExecStart=... $ARGS from /etc/default/prometheus-node-exporter, as Debian's).

The exporters are small Python HTTP servers that take the real flags (-a/-f/-c for
dcgm-exporter, --web.listen-address/--collector.textfile.directory for the node exporter),
record them in /run/<name>.args, and serve the Prometheus text format: the DCGM stand-in one
sample per field of its -f file for each GPU nvidia-smi (the simulator) lists, with the real
exporter's labels; the node exporter stand-in node_cpu_seconds_total plus the *.prom files of
its textfile directory (as the textfile collector does).

Usage: build_repo.py OUTDIR   (needs dpkg-deb and dpkg-scanpackages: dpkg-dev)
"""

import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "src"))
from dgxops.sim.aptrepo import build_pkg  # noqa: E402  (the driver repository's package builder)

DCGM_VERSIONS = ["1:4.4.1-1", "1:4.4.2-1"]
EXPORTER_VERSION = "4.4.1-4.5.2-1"
NODE_EXPORTER_VERSION = "1.5.0-1+b6"

DCGM_UNIT = """[Unit]
Description=NVIDIA DCGM service (dgxops stand-in)

[Service]
Type=simple
ExecStart=/bin/sh -c 'mkdir -p /run/nvidia-dcgm && echo @VERSION@ > /run/nvidia-dcgm/version && exec sleep infinity'

[Install]
WantedBy=multi-user.target
"""

EXPORTER_UNIT = """[Unit]
Description=NVIDIA DCGM exporter (dgxops stand-in)

[Service]
Type=simple
ExecStart=/usr/bin/dcgm-exporter

[Install]
WantedBy=multi-user.target
"""

NODE_UNIT = """[Unit]
Description=Prometheus exporter for machine metrics (dgxops stand-in)

[Service]
Restart=on-failure
User=root
EnvironmentFile=-/etc/default/prometheus-node-exporter
ExecStart=/usr/bin/prometheus-node-exporter $ARGS

[Install]
WantedBy=multi-user.target
"""

COMMON = r'''
import http.server, os, subprocess, sys


def serve(name, address, render):
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    with open("/run/%s.args" % name, "w") as fh:
        fh.write(" ".join(sys.argv[1:]) + "\n")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path != "/metrics":
                self.send_response(404)
                self.end_headers()
                return
            body = render().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    cls = http.server.ThreadingHTTPServer
    if ":" in host:
        import socket
        cls = type("V6", (cls,), {"address_family": socket.AF_INET6})
    cls((host, int(port)), Handler).serve_forever()
'''

DCGM_EXPORTER = "#!/usr/bin/python3\n# dcgm-exporter stand-in (dgxops tests)\n" + COMMON + r'''

def main(argv):
    address, fields_file = ":9400", "/etc/dcgm-exporter/default-counters.csv"
    i = 0
    while i < len(argv):
        if argv[i] in ("-a", "--address"):
            address = argv[i + 1]; i += 2
        elif argv[i] in ("-f", "--collectors"):
            fields_file = argv[i + 1]; i += 2
        elif argv[i] in ("-c", "--collect-interval"):
            i += 2
        elif argv[i] in ("-r", "--remote-hostengine-info"):
            # like the real exporter: connect to that host engine instead of starting an embedded one;
            # the stand-in host engine (nvidia-dcgm.service) must be running, or this fails
            hostengine = argv[i + 1]; i += 2
            if not os.path.exists("/run/nvidia-dcgm/version"):
                sys.exit("dcgm-exporter stand-in: no host engine at %s" % hostengine)
        else:
            sys.exit("dcgm-exporter stand-in: unknown flag %s" % argv[i])
    fields = []
    with open(fields_file) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                fields.append([c.strip() for c in line.split(",", 2)])
    hostname = open("/etc/hostname").read().strip()

    def render():
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name,pci.bus_id,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout
        lines = []
        for name, kind, help_text in fields:
            lines.append("# HELP %s %s" % (name, help_text))
            lines.append("# TYPE %s %s" % (name, kind))
            for row in out.strip().splitlines():
                idx, uuid, model, bus, driver = [c.strip() for c in row.split(",")]
                lines.append('%s{gpu="%s",UUID="%s",pci_bus_id="%s",device="nvidia%s",modelName="%s",Hostname="%s",DCGM_FI_DRIVER_VERSION="%s"} 0'
                             % (name, idx, uuid, bus, idx, model, hostname, driver))
        return "\n".join(lines) + "\n"

    serve("dcgm-exporter", address, render)


main(sys.argv[1:])
'''

NODE_EXPORTER = "#!/usr/bin/python3\n# prometheus-node-exporter stand-in (dgxops tests)\n" + COMMON + r'''

def main(argv):
    address, textdir = ":9100", "/var/lib/prometheus/node-exporter"
    for arg in argv:
        if arg.startswith("--web.listen-address="):
            address = arg.split("=", 1)[1]
        elif arg.startswith("--collector.textfile.directory="):
            textdir = arg.split("=", 1)[1]
        elif not arg.startswith("--"):
            sys.exit("node exporter stand-in: unexpected argument %s" % arg)

    def render():
        lines = ['# TYPE node_cpu_seconds_total counter']
        for mode in ("idle", "iowait", "user", "system"):
            lines.append('node_cpu_seconds_total{cpu="0",mode="%s"} 1' % mode)
        for name in sorted(os.listdir(textdir)) if os.path.isdir(textdir) else []:
            if name.endswith(".prom"):
                with open(os.path.join(textdir, name)) as fh:
                    lines.append(fh.read().rstrip("\n"))
        return "\n".join(lines) + "\n"

    serve("prometheus-node-exporter", address, render)


main(sys.argv[1:])
'''


def index(outdir):
    scan = subprocess.run(["dpkg-scanpackages", "--multiversion", "."], cwd=outdir, check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(os.path.join(outdir, "Packages"), "wb") as fh:
        fh.write(scan.stdout)
    with gzip.GzipFile(os.path.join(outdir, "Packages.gz"), "wb", mtime=0) as fh:
        fh.write(scan.stdout)
    lines = ["Origin: dgxops-test", "Label: dgxops stand-in repository", "Suite: ./", "Codename: ./",
             "Architectures: all amd64 arm64", "SHA256:"]
    for name in ("Packages", "Packages.gz"):
        data = open(os.path.join(outdir, name), "rb").read()
        lines.append(" %s %d %s" % (hashlib.sha256(data).hexdigest(), len(data), name))
    with open(os.path.join(outdir, "Release"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def build(outdir):
    nvidia, debian = os.path.join(outdir, "nvidia"), os.path.join(outdir, "debian")
    for d in (nvidia, debian):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    count = 0
    with tempfile.TemporaryDirectory(prefix="dgxops-mon-apt-") as work:
        for ver in DCGM_VERSIONS:
            upstream = ver.split(":", 1)[1].rsplit("-", 1)[0]
            build_pkg(work, nvidia, "datacenter-gpu-manager-4-core", ver,
                      files={"/lib/systemd/system/nvidia-dcgm.service": (DCGM_UNIT.replace("@VERSION@", upstream), 0o644)},
                      description="NVIDIA DCGM core, stand-in")
            build_pkg(work, nvidia, "datacenter-gpu-manager-4-proprietary", ver,
                      depends=["datacenter-gpu-manager-4-core (= %s)" % ver],
                      description="NVIDIA DCGM proprietary (profiling) libraries, stand-in")
            count += 2
        build_pkg(work, nvidia, "datacenter-gpu-manager-exporter", EXPORTER_VERSION,
                  depends=["datacenter-gpu-manager-4-core (>= 1:4)"],
                  files={"/usr/bin/dcgm-exporter": (DCGM_EXPORTER, 0o755),
                         "/lib/systemd/system/nvidia-dcgm-exporter.service": (EXPORTER_UNIT, 0o644)},
                  description="NVIDIA DCGM exporter, stand-in")
        build_pkg(work, debian, "prometheus-node-exporter", NODE_EXPORTER_VERSION,
                  files={"/usr/bin/prometheus-node-exporter": (NODE_EXPORTER, 0o755),
                         "/lib/systemd/system/prometheus-node-exporter.service": (NODE_UNIT, 0o644)},
                  section="net", description="Prometheus exporter for machine metrics, stand-in")
        count += 2
    # pool file names carry no epoch (as in Debian's archive): no ':' in the Filename field
    for name in os.listdir(nvidia):
        if ":" in name:
            pkg, rest = name.split("_", 1)
            os.rename(os.path.join(nvidia, name), os.path.join(nvidia, "%s_%s" % (pkg, rest.split(":", 1)[1])))
    index(nvidia)
    index(debian)
    return count


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: build_repo.py OUTDIR")
    for tool in ("dpkg-deb", "dpkg-scanpackages"):
        if shutil.which(tool) is None:
            sys.exit("%s not found: apt-get install dpkg-dev" % tool)
    print("%d packages in %s" % (build(argv[0]), argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
