#!/bin/bash
# Real `wg show dump` output from wireguard-go 0.0.20220316 + wireguard-tools 1.0.20210914
# (Debian bookworm) in two network namespaces, passed through verify's on-node command.
# Not run by the tests. Before it (as root, in $WORK):
#   for k in A B C D; do wg genkey > $k.key; wg pubkey < $k.key > $k.pub; done; wg genpsk > psk
#   ip netns add msA; ip netns add msB; ip link add msva type veth peer name msvb
#   ip link set msva netns msA; ip link set msvb netns msB
#   ip -n msA addr add 192.168.77.1/24 dev msva; ip -n msB addr add 192.168.77.2/24 dev msvb
#   ip -n msA link set msva up; ip -n msB link set msvb up
#   for i in wgA wgB nosuch; do PYTHONPATH=src python -c "from swarm_infra.verify.readers \
#     import wg_dump_command as c; print(c('$i'))" > $WORK/cmd_$i; done
set -u
cd "${WORK:?a directory with the keys A.key..D.key, their .pub and psk}"
A="ip netns exec msA"; B="ip netns exec msB"
WG_PROCESS_FOREGROUND=1 $A wireguard-go wgA > goA.log 2>&1 & pa=$!
WG_PROCESS_FOREGROUND=1 $B wireguard-go wgB > goB.log 2>&1 & pb=$!
for i in $(seq 50); do [ -S /var/run/wireguard/wgA.sock ] && [ -S /var/run/wireguard/wgB.sock ] && break; sleep 0.1; done
$A wg set wgA listen-port 51820 private-key A.key peer $(cat B.pub) allowed-ips 10.99.0.2/32 endpoint 192.168.77.2:51821 preshared-key psk peer $(cat C.pub) allowed-ips 10.99.0.3/32,10.99.1.0/24 peer $(cat D.pub) allowed-ips 10.99.0.4/32 endpoint 192.168.77.9:51820 persistent-keepalive 25
$B wg set wgB listen-port 51821 private-key B.key peer $(cat A.pub) allowed-ips 10.99.0.1/32 endpoint 192.168.77.1:51820 preshared-key psk
ip -n msA addr add 10.99.0.1/24 dev wgA; ip -n msB addr add 10.99.0.2/24 dev wgB; ip -n msA link set wgA up; ip -n msB link set wgB up
$A ping -c 2 -W 2 10.99.0.2 | tail -1; $A ping -c 1 -W 1 10.99.0.4 | tail -1

$A sh -c "$(cat cmd_wgA)" > node-a.txt; echo "rc A $?"
$B sh -c "$(cat cmd_wgB)" > node-b.txt; echo "rc B $?"
$A sh -c "$(cat cmd_nosuch)" > no-interface.txt; echo "rc none $?"
kill $pa $pb; wait
