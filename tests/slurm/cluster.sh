#!/usr/bin/env bash
# A real single-host Slurm with four nodes n1..n4, for the integration tests.
#
#   tests/slurm/cluster.sh start DIR [RELEASE]   start it in DIR (prints the exports a caller must use)
#   tests/slurm/cluster.sh stop DIR              stop what start started
#   tests/slurm/cluster.sh status DIR            show the nodes
#   tests/slurm/cluster.sh stop-ctld DIR         stop the controller only (the nodes and jobs go on)
#   tests/slurm/cluster.sh start-ctld DIR        start it again, from its saved state
#
# RELEASE is one of
#   22.05  (default) the host's own packages (Debian 12's slurm-wlm); start prints `export SLURM_CONF=...`
#   24.11  Debian trixie's slurm-wlm in the root built by tests/slurm/trixie-root.sh; start also writes
#          the client commands (sbatch squeue scontrol sinfo sacct scancel srun sdiag slurmrestd) to
#          DIR/bin and prints `export PATH=DIR/bin:$PATH`.
#
# RUNGUARD_SLURMD_TIMEOUT (default 30) is how long a node may not answer before Slurm marks it down.
# RUNGUARD_SLURM_PORT_BASE (default: from this script's pid) is the controller's port; nodes use the next 4.
# RUNGUARD_SLURM_GPUS (default 0) gives every node that many GPUs (gres/gpu without devices).
# RUNGUARD_SLURM_CPUS (default: nproc) is how many CPUs each node has for the scheduler.
# RUNGUARD_SLURM_JWT_KEY (a file of random bytes, readable by root only) makes the controller verify JSON
#   web tokens signed with it (AuthAltTypes=auth/jwt): `scontrol token` mints them, and slurmrestd with
#   rest_auth/jwt passes them on. Start fails when the release has no auth_jwt plugin.
#
# No munge (auth/none, cred/none: both releases still ship them), no systemd, everything under DIR.
#
# 24.11 only:
#   RUNGUARD_SLURM_ROOT    the trixie root (default /var/cache/runguard/trixie-root)
#   RUNGUARD_SLURM_BINDS   host directories, separated by `:`, that the jobs see at the same path (job
#                          scripts' working and output directories outside DIR). DIR and this script's
#                          directory are always there.
# The daemons run chrooted in the root, in a mount namespace of their own: the root's /proc, /sys, /dev,
# /tmp, /run, the host's /etc/hosts, /etc/passwd and /etc/group and the directories above exist only
# there, so nothing stays mounted once the cluster's processes have ended. The client commands in DIR/bin
# run the root's binaries through the root's dynamic loader when called from the host (any user, any
# working directory, any file on the host), and directly inside the root (job steps keep PATH).
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
    echo "usage: $0 start|stop|status|stop-ctld|start-ctld DIR [22.05|24.11]" >&2
    exit 2
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# The release: as asked on start, as recorded by start otherwise.
release=${3:-}
if [ -z "$release" ]; then
    if [ "$cmd" != start ] && [ -f "$dir/release" ]; then
        release=$(cat "$dir/release")
    else
        release=22.05
    fi
fi
# Reservations of controller ports by the clusters of this machine, one directory a port base holding
# the cluster directory that took it; a reservation whose cluster directory is gone is free again.
ports_dir=${TMPDIR:-/tmp}/runguard-slurm-ports

# A reservation is abandoned when it is a day old and no daemon its cluster recorded is alive: a
# cluster killed without its stop keeps its directory, and no test keeps a controller down for a day.
abandoned() {
    local reservation=$1 owner=$2 pidfile
    [ -n "$(find "$reservation" -maxdepth 0 -mmin +1440 2>/dev/null)" ] || return 1
    for pidfile in "$owner"/*.pid; do
        [ -f "$pidfile" ] || continue
        kill -0 "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null && return 1
    done
    return 0
}

# A port base whose five ports no socket uses and no other cluster reserved, below the kernel's
# ephemeral range (where srun, slurmstepd and clients bind ports of their own at random): starting
# from one the pid chooses, so that concurrent clusters seldom try the same.
pick_port_base() {
    mkdir -p "$ports_dir"
    local used first candidate port taken
    used=" $(ss -Htan 2>/dev/null | awk '{ n = split($4, a, ":"); printf "%s ", a[n] }') "
    first=$(($$ % 1500))
    for offset in $(seq 0 1499); do
        candidate=$((20000 + ((first + offset) % 1500) * 8))
        taken=0
        for port in $(seq "$candidate" $((candidate + 4))); do
            case "$used" in *" $port "*) taken=1 ;; esac
        done
        [ "$taken" = 0 ] || continue
        if [ -d "$ports_dir/$candidate" ]; then
            owner=$(cat "$ports_dir/$candidate/dir" 2>/dev/null || true)
            if [ -n "$owner" ] && [ -d "$owner" ] && ! abandoned "$ports_dir/$candidate" "$owner"; then
                continue
            fi
            rm -rf "$ports_dir/$candidate"
        fi
        # mkdir is atomic: of two clusters choosing the same base, one gets it.
        if mkdir "$ports_dir/$candidate" 2>/dev/null; then
            echo "$dir" >"$ports_dir/$candidate/dir"
            echo "$candidate"
            return
        fi
    done
    echo "no free port base for a Slurm cluster" >&2
    exit 1
}

# Gives back the cluster's port reservation.
release_port_base() {
    local base
    base=$(cat "$dir/port_base" 2>/dev/null || true)
    [ -n "$base" ] || return 0
    if [ "$(cat "$ports_dir/$base/dir" 2>/dev/null)" = "$dir" ]; then
        rm -rf "${ports_dir:?}/$base"
    fi
}

case "$release" in
    22.05 | 24.11) ;;
    *) echo "unknown release $release (22.05 or 24.11)" >&2; exit 2 ;;
esac

root=${RUNGUARD_SLURM_ROOT:-/var/cache/runguard/trixie-root}
root=${root%/}
# The commands start writes to DIR/bin for 24.11.
clients=(sbatch squeue scontrol sinfo sacct scancel srun sdiag slurmrestd)

# slurm.conf for four nodes on this host; $1 adds lines (PluginDir...).
write_conf() {
    local cpus base gres="" gpus=${RUNGUARD_SLURM_GPUS:-0}
    # RUNGUARD_SLURM_CPUS: CPUs per node as the scheduler counts them (config_overrides accepts more than
    # the machine has), for benchmarks that run a hundred small jobs at once.
    cpus=${RUNGUARD_SLURM_CPUS:-$(nproc)}
    if [ "$gpus" != 0 ]; then
        # GPUs that only exist for the scheduler: counted, allocated and shown. 24.11 ignores a GPU
        # without a device file, so each one names a harmless character device (/dev/null, /dev/zero...).
        local devices=(/dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/ptmx /dev/console)
        if [ "$gpus" -gt ${#devices[@]} ]; then
            echo "RUNGUARD_SLURM_GPUS: at most ${#devices[@]}" >&2
            exit 2
        fi
        gres=" Gres=gpu:$gpus"
        printf 'Name=gpu File=%s\n' "${devices[@]:0:$gpus}" > "$dir/gres.conf"
        # (AccountingStorageTRES=gres/gpu would add them to AllocTRES, but slurmctld 24.11 refuses it
        # without slurmdbd.)
        set -- "${1:-}GresTypes=gpu
"
    fi
    if [ -n "${RUNGUARD_SLURM_JWT_KEY:-}" ]; then
        local plugins=${PLUGIN_DIR:-/usr/lib/x86_64-linux-gnu/slurm-wlm}
        if [ ! -f "$plugins/auth_jwt.so" ]; then
            echo "RUNGUARD_SLURM_JWT_KEY: this Slurm has no $plugins/auth_jwt.so (Debian: slurm-wlm-jwt-plugin)" >&2
            exit 3
        fi
        set -- "${1:-}AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$RUNGUARD_SLURM_JWT_KEY
"
    fi
    # Ports of their own, so clusters of concurrent test runs do not answer each other.
    base=${RUNGUARD_SLURM_PORT_BASE:-$(pick_port_base)}
    echo "$base" >"$dir/port_base"
    cat > "$conf" <<CONF
ClusterName=lab
SlurmctldHost=localhost
SlurmctldPort=$base
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobRequeue=1
MinJobAge=600
KillWait=5
SlurmdTimeout=${RUNGUARD_SLURMD_TIMEOUT:-30}
${1:-}NodeName=n[1-4] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((base + 1))-$((base + 4))] CPUs=$cpus$gres State=UNKNOWN
PartitionName=gpu Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP
CONF
}

# Waits until the four nodes are idle, then prints the exports.
wait_idle() {
    local idle
    for i in $(seq 1 150); do
        # A controller that died at start (a fatal configuration error) is not waited for.
        if [ "$i" -gt 10 ] && ! { [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; }; then
            echo "slurmctld is not running; the end of $dir/log/slurmctld.log:" >&2
            tail -n 5 "$dir/log/slurmctld.log" >&2 || true
            return 1
        fi
        idle=$(sinfo -h -o "%T %D" 2>/dev/null | awk '$1 == "idle" {print $2}')
        if [ "${idle:-0}" = "4" ]; then
            echo "export SLURM_CONF=$conf"
            if [ "$release" = 24.11 ]; then
                echo "export PATH=$dir/bin:\$PATH"
            fi
            return 0
        fi
        sleep 0.2
    done
    echo "slurm did not come up; logs in $dir/log" >&2
    sinfo >&2 || true
    return 1
}

start_2205() {
    for bin in slurmctld slurmd sinfo; do
        command -v "$bin" >/dev/null || { echo "slurm is not installed ($bin missing)" >&2; exit 3; }
    done
    mkdir -p "$dir/state" "$dir/log" "$dir/spool"
    echo 22.05 > "$dir/release"
    write_conf ""
    slurmctld -f "$conf" -i >"$dir/log/slurmctld.out" 2>&1 &
    echo $! > "$dir/slurmctld.launcher.pid"
    sleep 0.5
    for node in n1 n2 n3 n4; do
        slurmd -f "$conf" -N "$node" >"$dir/log/slurmd-$node.out" 2>&1 &
        echo $! > "$dir/slurmd-$node.launcher.pid"
    done
    wait_idle || exit 1
}

# One client command of the root, as a script in DIR/bin.
write_wrapper() {
    local name=$1 path=$2 libs="$root/usr/lib/x86_64-linux-gnu"
    {
        echo '#!/bin/sh'
        echo "# $name of Slurm 24.11 in $root, for the cluster in $dir (written by tests/slurm/cluster.sh)."
        echo '# Inside the root (a job step) it is the command itself; on the host it runs through the root'"'"'s loader.'
        printf 'conf=%q\n' "$conf"
        # shellcheck disable=SC2016 # written for the wrapper to expand
        echo ': "${SLURM_CONF:=$conf}"'
        echo 'export SLURM_CONF'
        printf 'if [ -e /etc/runguard-lab-root ]; then exec %q "$@"; fi\n' "$path"
        printf 'exec %q --inhibit-cache --library-path %q --argv0 %q %q "$@"\n' \
            "$libs/ld-linux-x86-64.so.2" "$libs/slurm-wlm:$libs" "$name" "$root$path"
    } > "$dir/bin/$name"
    chmod 755 "$dir/bin/$name"
}

# What runs in the cluster's own mount namespace: the mounts, then the daemons chrooted in the root.
# Arguments: ROOT DIR CONF BIND...
# shellcheck disable=SC2016
namespace_script='
set -euo pipefail
root=$1 dir=$2 conf=$3
shift 3
readlink /proc/self/ns/mnt > "$dir/mntns"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/tmp"
mount -t tmpfs tmpfs "$root/run"
for file in /etc/hosts /etc/passwd /etc/group; do
    mount --bind "$file" "$root$file"
done
for path in "$@"; do
    # An empty directory in the root as the mount point (in its own /tmp when under /tmp).
    mkdir -p -- "$root$path"
    mount --bind "$path" "$root$path"
done
chroot "$root" /usr/sbin/slurmctld -f "$conf" -i >"$dir/log/slurmctld.out" 2>&1
sleep 0.3
for node in n1 n2 n3 n4; do
    chroot "$root" /usr/sbin/slurmd -f "$conf" -N "$node" >"$dir/log/slurmd-$node.out" 2>&1
done
'

start_2411() {
    if [ ! -f "$root/etc/runguard-lab-root" ] || [ ! -x "$root/usr/sbin/slurmctld" ]; then
        echo "no Slurm 24.11 root at $root: build it with tests/slurm/trixie-root.sh $root" >&2
        exit 3
    fi
    if [ "$(id -u)" != 0 ]; then
        echo "Slurm 24.11 runs chrooted in $root: start it as root" >&2
        exit 3
    fi
    for bin in unshare chroot; do
        command -v "$bin" >/dev/null || { echo "$bin is missing (util-linux, coreutils)" >&2; exit 3; }
    done
    if [ -f "$dir/mntns" ] && [ -n "$(namespace_pids)" ]; then
        echo "a cluster already runs in $dir: stop it first" >&2
        exit 1
    fi
    mkdir -p "$dir/state" "$dir/log" "$dir/spool" "$dir/bin"
    echo 24.11 > "$dir/release"
    # PluginDir is the root's own path: trixie-root.sh makes it lead to the same place inside the root.
    PLUGIN_DIR=$root/usr/lib/x86_64-linux-gnu/slurm-wlm
    write_conf "PluginDir=$root/usr/lib/x86_64-linux-gnu/slurm-wlm
PlugStackConfig=$dir/plugstack.conf
"
    : > "$dir/plugstack.conf"
    for name in "${clients[@]}"; do
        case "$name" in
            slurmrestd) write_wrapper "$name" "/usr/sbin/$name" ;;
            *) write_wrapper "$name" "/usr/bin/$name" ;;
        esac
    done
    export PATH="$dir/bin:$PATH"

    local binds=("$dir" "$here") path
    local extra=${RUNGUARD_SLURM_BINDS:-}
    IFS=: read -r -a more <<< "$extra"
    for path in "${more[@]}"; do
        [ -n "$path" ] || continue
        if [ ! -d "$path" ]; then
            echo "RUNGUARD_SLURM_BINDS: $path is not a directory" >&2
            exit 2
        fi
        binds+=("$(cd "$path" && pwd)")
    done
    unshare --mount --propagation private -- \
        bash -c "$namespace_script" cluster "$root" "$dir" "$conf" "${binds[@]}" \
        >"$dir/log/namespace.out" 2>&1 || {
        echo "could not set up the root's mounts; $dir/log/namespace.out:" >&2
        cat "$dir/log/namespace.out" >&2
        stop_2411
        exit 1
    }
    wait_idle || { stop_2411; exit 1; }
}

# The processes of the 24.11 cluster: every process in its mount namespace.
namespace_pids() {
    local ns self proc mountpoint
    [ -f "$dir/mntns" ] || return 0
    ns=$(cat "$dir/mntns")
    self=$(readlink /proc/self/ns/mnt)
    # Never the host's own namespace.
    [ -n "$ns" ] && [ "$ns" != "$self" ] || return 0
    # A namespace's number can be reused once it is gone: the process must also have DIR mounted (seen
    # from inside the root, or from outside it).
    mountpoint=${dir// /\\040}
    for proc in /proc/[0-9]*; do
        if [ "$(readlink "$proc/ns/mnt" 2>/dev/null)" = "$ns" ] &&
            A="$mountpoint" B="${root// /\\040}$mountpoint" \
                awk '$5 == ENVIRON["A"] || $5 == ENVIRON["B"] { found = 1 } END { exit !found }' "$proc/mountinfo" 2>/dev/null; then
            echo "${proc#/proc/}"
        fi
    done
}

# The pids recorded in DIR (daemons, launchers, slurmrestd), ended as 22.05's stop always did.
stop_pidfiles() {
    for pidfile in "$dir"/*.pid; do
        [ -f "$pidfile" ] || continue
        kill "$(cat "$pidfile")" 2>/dev/null || true
    done
    sleep 0.5
    for pidfile in "$dir"/*.pid; do
        [ -f "$pidfile" ] || continue
        kill -9 "$(cat "$pidfile")" 2>/dev/null || true
        rm -f "$pidfile"
    done
}

# 22.05: job steps (slurmstepd and the tasks under it) outlive their slurmd; the ones working in DIR
# are this cluster's.
stop_steps_2205() {
    local proc pid steps=() all
    for proc in /proc/[0-9]*; do
        [ "$(cat "$proc/comm" 2>/dev/null)" = slurmstepd ] || continue
        case "$(readlink "$proc/cwd" 2>/dev/null)" in
            "$dir" | "$dir"/*) steps+=("${proc#/proc/}") ;;
        esac
    done
    [ ${#steps[@]} -gt 0 ] || return 0
    all=("${steps[@]}")
    for pid in "${steps[@]}"; do
        mapfile -t -O "${#all[@]}" all < <(descendants "$pid")
    done
    kill -9 "${all[@]}" 2>/dev/null || true
}

descendants() {
    local child
    for child in $(pgrep -P "$1" 2>/dev/null); do
        echo "$child"
        descendants "$child"
    done
}

stop_2411() {
    stop_pidfiles
    local pids
    mapfile -t pids < <(namespace_pids)
    if [ ${#pids[@]} -gt 0 ]; then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        # Stopped processes (a frozen node) only act on SIGTERM once continued.
        kill -CONT "${pids[@]}" 2>/dev/null || true
        for _ in $(seq 1 20); do
            [ -n "$(namespace_pids)" ] || break
            sleep 0.1
        done
        mapfile -t pids < <(namespace_pids)
        [ ${#pids[@]} -eq 0 ] || kill -9 "${pids[@]}" 2>/dev/null || true
        for _ in $(seq 1 50); do
            [ -n "$(namespace_pids)" ] || break
            sleep 0.1
        done
    fi
    if [ -n "$(namespace_pids)" ]; then
        echo "processes of $dir are still running: $(namespace_pids | tr '\n' ' ')" >&2
        return 1
    fi
    # The namespace, and every mount in it, is gone with its last process.
    rm -f "$dir/mntns"
}

case "$cmd" in
    start)
        case "$release" in
            22.05) start_2205 ;;
            24.11) start_2411 ;;
        esac
        ;;
    stop)
        case "$release" in
            22.05) stop_pidfiles; stop_steps_2205 ;;
            24.11) stop_2411 ;;
        esac
        release_port_base
        ;;
    status)
        if [ "$release" = 24.11 ]; then
            export PATH="$dir/bin:$PATH"
        fi
        sinfo -N -o "%N %T %E"
        ;;
    stop-ctld)
        pid=$(cat "$dir/slurmctld.pid")
        kill "$pid"
        for _ in $(seq 1 150); do
            kill -0 "$pid" 2>/dev/null || exit 0
            sleep 0.2
        done
        echo "slurmctld $pid did not stop" >&2
        exit 1
        ;;
    start-ctld)
        case "$release" in
            22.05) slurmctld -f "$conf" -i >>"$dir/log/slurmctld.out" 2>&1 ;;
            # Into the cluster's mount namespace, where the root's mounts are (a node daemon is in it).
            24.11)
                export PATH="$dir/bin:$PATH"
                nsenter -t "$(cat "$dir/slurmd-n1.pid")" -m \
                    chroot "$root" /usr/sbin/slurmctld -f "$conf" -i >>"$dir/log/slurmctld.out" 2>&1
                ;;
        esac
        for _ in $(seq 1 150); do
            if scontrol ping 2>/dev/null | grep -q UP; then
                exit 0
            fi
            sleep 0.2
        done
        echo "slurmctld did not come back; logs in $dir/log" >&2
        exit 1
        ;;
    *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
