#!/bin/sh
# Start one swarm lab node as a system container (used by swarm_infra.lab.node).
#
#   node-init.sh host CGROUP NETNS_PATH LOWER UPPER WORK ROOT HOSTNAME LOG NOTIFY_SOCKET
#
# Stage "host" (on the host): join the node's own cgroup v2 directory, enter the node's
# network namespace and unshare mount, PID, UTS, IPC and cgroup namespaces.
# Stage "init" (PID 1 of the new PID namespace): print its host PID on stdout for the
# launcher, assemble the root filesystem and exec systemd. Every mount is made inside the
# node's private mount namespace, so it disappears with the node.
set -eu

if [ "$1" = host ]; then
    shift
    mkdir -p "$1"
    echo $$ > "$1/cgroup.procs"
    netns=$2
    shift 2
    exec nsenter --net="$netns" \
        unshare --mount --pid --uts --ipc --cgroup --fork --propagation private "$0" init "$@"
fi

shift
lower=$1 upper=$2 work=$3 root=$4 name=$5 log=$6 notify=$7
# /proc is still the host's here, so field 1 of /proc/self/stat (read by the shell itself) is
# this process's host PID: the one the launcher stops the node with.
read -r hostpid _ < /proc/self/stat
echo "$hostpid"
exec >>"$log" 2>&1 </dev/null

mount -t overlay overlay -o "lowerdir=$lower,upperdir=$upper,workdir=$work" "$root"
mount -t proc proc "$root/proc"
# /proc/sys read-only except the node's own net.* (as LXC's proc:mixed): net.* belongs to
# the node's network namespace; everything else under /proc/sys is the host kernel's.
mount --bind "$root/proc/sys/net" "$root/proc/sys/net"
mount --rbind "$root/proc/sys" "$root/proc/sys"
mount -o remount,bind,ro "$root/proc/sys"
for p in sysrq-trigger irq bus fs; do
    [ -e "$root/proc/$p" ] && mount --bind -o ro "$root/proc/$p" "$root/proc/$p"
    [ -e "$root/proc/$p" ] && mount -o remount,bind,ro "$root/proc/$p"
done
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$root/sys"
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$root/sys/fs/cgroup"
mount -t tmpfs -o mode=755,nosuid,size=64k tmpfs "$root/dev"
# Device nodes made afresh with the standard modes (the host's may have others).
mknod -m 666 "$root/dev/null" c 1 3
mknod -m 666 "$root/dev/zero" c 1 5
mknod -m 666 "$root/dev/full" c 1 7
mknod -m 666 "$root/dev/random" c 1 8
mknod -m 666 "$root/dev/urandom" c 1 9
mknod -m 666 "$root/dev/tty" c 5 0
mkdir -p "$root/dev/net" "$root/dev/pts" "$root/dev/shm"
# WireGuard in userspace (wireguard-go) needs the TUN device; the kernel module is absent.
mknod -m 666 "$root/dev/net/tun" c 10 200
mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$root/dev/pts"
ln -s pts/ptmx "$root/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
# systemd's console output goes to the node's log file on the host.
touch "$root/dev/console"
mount --bind "$log" "$root/dev/console"
# systemd sends READY=1 to $NOTIFY_SOCKET when boot has finished (as under systemd-nspawn);
# the launcher listens on the host end, so waiting for boot needs no polling.
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$root/run"
mkdir -p "$root/run/host"
touch "$root/run/host/notify"
mount --bind "$notify" "$root/run/host/notify"
export NOTIFY_SOCKET=/run/host/notify
hostname "$name"

cd "$root"
mkdir -p .lab-oldroot
pivot_root . .lab-oldroot
umount -l /.lab-oldroot
rmdir /.lab-oldroot
export container=swarm-lab
exec /lib/systemd/systemd
