#!/bin/sh
# Regenerates the fixtures beside this script with the real tools, on loopback and a temp file.
# Needs iperf3, fio and ping (Debian: apt-get install -y iperf3 fio iputils-ping).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'kill "$server" 2>/dev/null || true; rm -rf "$tmp"' EXIT
iperf3 -s -B 127.0.0.1 -p 5299 -D -I "$tmp/iperf3.pid"
server=""
for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$tmp/iperf3.pid" ] && break; sleep 0.2; done
server=$(cat "$tmp/iperf3.pid")
iperf3 -c 127.0.0.1 -p 5299 -t 2 -J > "$here/iperf3-single.json"
iperf3 -c 127.0.0.1 -p 5299 -t 2 -P 4 -J > "$here/iperf3-p4.json"
kill "$server"
iperf3 -c 127.0.0.1 -p 5299 -t 1 -J > "$here/iperf3-refused.json" || true
fio --output-format=json --name=randread-4k --filename="$tmp/fio.dat" --size=64M --rw=randread \
    --bs=4k --iodepth=32 --ioengine=libaio --direct=0 --runtime=2 --time_based > "$here/fio-randread-4k-qd32.json"
fio --output-format=json --name=seqread-1m --filename="$tmp/fio.dat" --size=64M --rw=read --bs=1M \
    --iodepth=4 --runtime=2 --time_based \
    --name=seqwrite-1m --stonewall --filename="$tmp/fio.dat" --size=64M --rw=write --bs=1M \
    --iodepth=4 --runtime=2 --time_based > "$here/fio-seq-1m.json"
# What `swarm metrics run` runs on a scratch mount: probes.fio_command(DIR, 16, 1, ramp_s=1).
mkdir "$tmp/scratch"
(cd "$here/../../.." && PYTHONPATH=src python3 -c \
  'import sys; from swarm_infra.metrics.probes import fio_command; print(fio_command(sys.argv[1], 16, 1, 1))' \
  "$tmp/scratch") | sh > "$here/fio-probe.json"
ping -c 20 -i 0.2 127.0.0.1 > "$here/ping-loopback.txt"
