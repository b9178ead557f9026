#!/usr/bin/env bash
# A real single-host Slurm (Debian's slurm-wlm) with four nodes n1..n4, for the integration tests.
#
#   tests/slurm/cluster.sh start DIR   start it in DIR (prints `export SLURM_CONF=...`)
#   tests/slurm/cluster.sh stop DIR    stop what start started
#   tests/slurm/cluster.sh status DIR  show the nodes
#
# RUNGUARD_SLURMD_TIMEOUT (default 30) is how long a node may not answer before Slurm marks it down.
#
# No munge (auth/none), no systemd, everything under DIR.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
    echo "usage: $0 start|stop|status DIR" >&2
    exit 2
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"

start() {
    for bin in slurmctld slurmd sinfo; do
        command -v "$bin" >/dev/null || { echo "slurm is not installed ($bin missing)" >&2; exit 3; }
    done
    mkdir -p "$dir/state" "$dir/log" "$dir/spool"
    cpus=$(nproc)
    # Ports of their own, so clusters of concurrent test runs do not answer each other.
    base=${RUNGUARD_SLURM_PORT_BASE:-$((20000 + ($$ % 2000) * 8))}
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
NodeName=n[1-4] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((base + 1))-$((base + 4))] CPUs=$cpus State=UNKNOWN
PartitionName=gpu Nodes=n[1-4] Default=YES MaxTime=INFINITE State=UP
CONF
    slurmctld -f "$conf" -i >"$dir/log/slurmctld.out" 2>&1 &
    echo $! > "$dir/slurmctld.launcher.pid"
    sleep 0.5
    for node in n1 n2 n3 n4; do
        slurmd -f "$conf" -N "$node" >"$dir/log/slurmd-$node.out" 2>&1 &
        echo $! > "$dir/slurmd-$node.launcher.pid"
    done
    for _ in $(seq 1 100); do
        idle=$(sinfo -h -o "%T %D" 2>/dev/null | awk '$1 == "idle" {print $2}')
        if [ "${idle:-0}" = "4" ]; then
            echo "export SLURM_CONF=$conf"
            return 0
        fi
        sleep 0.2
    done
    echo "slurm did not come up; logs in $dir/log" >&2
    sinfo >&2 || true
    exit 1
}

stop() {
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

case "$cmd" in
    start) start ;;
    stop) stop ;;
    status) sinfo -N -o "%N %T %E" ;;
    *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
