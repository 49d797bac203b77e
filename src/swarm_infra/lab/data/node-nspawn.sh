#!/bin/sh
# Start one swarm lab node with systemd-nspawn (used by swarm_infra.lab.node).
#
#   node-nspawn.sh CGROUP LOWER UPPER WORK ROOT -- SYSTEMD-NSPAWN-ARGUMENTS...
#
# Joins the node's own cgroup v2 directory (nspawn makes its supervisor/payload cgroups
# below it, so `swarm lab down` finds every process of the node there), then, in a private
# mount namespace, mounts the node's root filesystem (an overlay: the cached image, read-only,
# and any read-only layers above it (LOWER is overlayfs' lowerdir list, top first), under the
# node's own upper directory) and execs systemd-nspawn on it. The overlay mount
# lives only in that namespace: it disappears with the node, whatever happens to the lab.
# Each step execs the next, so this process's PID is systemd-nspawn's.
set -eu
cgroup=$1 lower=$2 upper=$3 work=$4 root=$5
shift 6
mkdir -p "$cgroup"
echo $$ > "$cgroup/cgroup.procs"
exec unshare --mount --propagation private /bin/sh -c '
    mount -t overlay overlay -o "lowerdir=$1,upperdir=$2,workdir=$3" "$4"
    shift 4
    exec systemd-nspawn "$@"
' node-nspawn "$lower" "$upper" "$work" "$root" "$@"
