#!/usr/bin/env bash
# Records what a real Slurm answers in the situations the backend meets, as parser fixtures.
#
#   tests/slurm/capture.sh RELEASE OUTDIR [WORKDIR]     RELEASE: 22.05 or 24.11
#
# Starts two clusters of that release with tests/slurm/cluster.sh (and slurmrestd with restd.sh) in
# WORKDIR (default: a new directory under /tmp), drives jobs through the situations below, and writes
# each command's standard output, verbatim, to OUTDIR/<command>_<release>_<situation>.<ext>:
#
# Both clusters give each node 2 GPUs (RUNGUARD_SLURM_GPUS=2), and jobs 1 ask --gpus-per-node=2.
#
#   cluster a: no_jobs; running (job 1: 2 nodes, AJR comment, -o %x_%j.log); failed (exit 3); held
#              (job 1 after requeuehold, job 2 held by its owner nobody, job 3 held by root); begintime
#              (job 1 released with ExcNodeList=n2, waiting on BeginTime); requeued_running (job 1 after
#              StartTime=now); completed (job 1's second run exits 0); drained (n3 drained)
#   cluster b: node_not_responding (n2's slurmd and job step stopped with SIGSTOP); node_fail_requeued
#              (Slurm ended the job NODE_FAIL and requeued it); node_fail_rerun (it runs again by itself)
#
# Commands: squeue --all --json; squeue --all --json --states=all; scontrol show job -o --details;
# scontrol show job --json (24.11);
# sinfo --noheader --Node --format=%N %t; sinfo -N -h -o "%N %T %E"; sinfo --json; slurmrestd
# GET /slurm/VERSION/jobs and /nodes for every version it serves; the jobcomp file; sacct's stderr.
# The timeline of each cluster goes to OUTDIR/capture_<release>.timeline (not a fixture, a record).
set -euo pipefail

release=${1:-}
out=${2:-}
if [ -z "$release" ] || [ -z "$out" ]; then
    echo "usage: $0 22.05|24.11 OUTDIR [WORKDIR]" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=${3:-$(mktemp -d "/tmp/slurm-capture-$release.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
chmod 755 "$work"
as_nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}'
timeline="$out/capture_$release.timeline"
: > "$timeline"

case "$release" in
    22.05) versions=(v0.0.36 v0.0.37 v0.0.38); plugins=openapi/v0.0.36,openapi/v0.0.37,openapi/v0.0.38 ;;
    24.11) versions=(v0.0.40 v0.0.41 v0.0.42); plugins=openapi/slurmctld ;;
    *) echo "unknown release $release" >&2; exit 2 ;;
esac

t0=$(date +%s.%N)
note() {
    local now
    now=$(date +%s.%N)
    printf '%7.1f s  %s  %s\n' "$(awk -v a="$now" -v b="$t0" 'BEGIN { print a - b }')" "$(date -u +%H:%M:%S)" "$*" | tee -a "$timeline"
}

# Polls a command until it succeeds (TIMEOUT seconds at most).
wait_until() {
    local timeout=$1
    shift
    local end=$(($(date +%s) + timeout))
    until "$@"; do
        if [ "$(date +%s)" -ge "$end" ]; then
            echo "timed out waiting for: $*" >&2
            return 1
        fi
        sleep 0.5
    done
}

field() { # field JOBID NAME: one KEY=VALUE of `scontrol show job -o`
    scontrol show job -o "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { sub(/^[^=]*=/, ""); print; exit }'
}
job_is() { [ "$(field "$1" JobState)" = "$2" ]; }
reason_is() { [ "$(field "$1" Reason)" = "$2" ]; }
node_state() { sinfo -h -N -n "$1" -o '%T' | head -n 1; }
node_matches() { [[ "$(node_state "$1")" =~ $2 ]]; }
# Both ranks of the job's step have logged their first line.
both_ranks_up() { [ "$(grep -c '^[01]: rank' "$1" 2>/dev/null)" = 2 ]; }
log_has() { grep -q -- "$2" "$1" 2>/dev/null; }
requeued_once() { job_is "$1" PENDING && [ "$(field "$1" Restarts)" = 1 ]; }
answers_again() { ! node_matches "$1" '\*$'; }

# Everything the job commands answer now.
snap_jobs() {
    local name=$1 v
    squeue --all --json > "$out/squeue_${release}_$name.json"
    # 24.11 applies squeue's default state filter to --json (finished jobs left out); 22.05 ignores it.
    squeue --all --json --states=all > "$out/squeue-states-all_${release}_$name.json"
    scontrol show job -o --details > "$out/scontrol_${release}_$name.txt"
    if [ "$release" = 24.11 ]; then
        scontrol show job --json > "$out/scontrol-json_${release}_$name.json"
    fi
    rest_snapshot jobs "$name"
}

# slurmrestd's answer on every version it serves: `rest_snapshot jobs|nodes NAME`.
rest_snapshot() {
    local what=$1 name=$2 v
    for v in "${versions[@]}"; do
        curl -sS --max-time 10 --unix-socket "$dir/rest/rest.sock" "http://slurmrestd/slurm/$v/$what" \
            > "$out/slurmrestd-$v-${what}_${release}_$name.json"
    done
    note "snapshot $name ($what)"
}

# Everything the node commands answer now.
snap_nodes() {
    local name=$1 v
    sinfo --noheader --Node --format="%N %t" > "$out/sinfo_${release}_$name.txt"
    sinfo -N -h -o "%N %T %E" > "$out/sinfo-reasons_${release}_$name.txt"
    sinfo --json > "$out/sinfo-json_${release}_$name.json"
    rest_snapshot nodes "$name"
}

start_cluster() {
    dir="$work/$1"
    jobs="$work/$1-jobs"
    mkdir -p "$dir" "$jobs"
    chmod 777 "$jobs"
    local exports
    exports=$(RUNGUARD_SLURM_GPUS=2 RUNGUARD_SLURM_BINDS="$jobs" bash "$here/cluster.sh" start "$dir" "$release")
    export SLURM_CONF="$dir/slurm.conf"
    if [ "$release" = 24.11 ]; then
        export PATH="$dir/bin:$ORIGINAL_PATH"
    fi
    note "cluster $1 up: $(echo "$exports" | tr '\n' ' ')"
    RUNGUARD_SLURMRESTD_PLUGINS="$plugins" bash "$here/restd.sh" start "$dir"
    note "slurmrestd up (${versions[*]})"
}

stop_cluster() {
    bash "$here/restd.sh" stop "$dir" || true
    bash "$here/cluster.sh" stop "$dir" || true
    note "cluster stopped"
}

ORIGINAL_PATH=$PATH
dir=
trap '[ -z "$dir" ] || stop_cluster' EXIT

# ---- cluster a: a job's life through failure, requeue, holds and completion
start_cluster a
scontrol show job -o --details > "$out/scontrol_${release}_no_jobs.txt"
squeue --all --json > "$out/squeue_${release}_no_jobs.json"
# sacct without accounting, and against a slurmdbd that does not run.
# shellcheck disable=SC2054 # the commas are inside one argument (--format=...)
sacct_argv=(sacct --parsable2 --noheader --allocations --duplicates --jobs 1
    --format=JobID,JobName,User,Partition,State,ExitCode,NodeList,NNodes,Submit,Start,End,Reason)
"${sacct_argv[@]}" > /dev/null 2> "$out/sacct_${release}_accounting_disabled.stderr" || true
sed 's|^AccountingStorageType=.*|AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=localhost|' \
    "$dir/slurm.conf" > "$dir/slurm-dbd.conf"
SLURM_CONF="$dir/slurm-dbd.conf" "${sacct_argv[@]}" > /dev/null 2> "$out/sacct_${release}_slurmdbd_unreachable.stderr" || true

cat > "$jobs/train.sbatch" <<SCRIPT
#!/bin/bash
#SBATCH --comment='$comment'
#SBATCH -J train
#SBATCH -N 2
#SBATCH --gpus-per-node=2
#SBATCH -o $jobs/%x_%j.log
attempt=\${SLURM_RESTART_COUNT:-0}
echo "attempt \$attempt on \$SLURM_JOB_NODELIST"
srun -l bash -c 'echo "rank \$SLURM_PROCID on \$SLURMD_NODENAME"; while [ ! -e "\$0" ]; do sleep 0.2; done' "$jobs/go-\$attempt"
if [ "\$attempt" = 0 ]; then exit 3; fi
exit 0
SCRIPT
cd "$jobs"
job=$(sbatch --parsable train.sbatch)
note "job $job submitted"
wait_until 30 job_is "$job" RUNNING
wait_until 30 both_ranks_up "$jobs/train_$job.log"
note "job $job RUNNING on $(field "$job" NodeList)"
snap_jobs running
snap_nodes running

# Two 4-node jobs that wait behind it, held: one by its owner (nobody), one by root.
user_job=$("${as_nobody[@]}" sbatch --parsable -J user-held -N 4 -o "$jobs/%x_%j.log" --wrap 'sleep 1')
root_job=$(sbatch --parsable -J root-held -N 4 -o "$jobs/%x_%j.log" --wrap 'sleep 1')
"${as_nobody[@]}" scontrol hold "$user_job"
scontrol hold "$root_job"
note "jobs $user_job (held by nobody, its owner) and $root_job (held by root) submitted"

touch "$jobs/go-0"
wait_until 30 job_is "$job" FAILED
note "job $job FAILED ($(field "$job" ExitCode))"
snap_jobs failed

scontrol requeuehold "$job"
wait_until 30 job_is "$job" PENDING
note "job $job requeuehold: $(field "$job" JobState) $(field "$job" Reason)"
snap_jobs held

scontrol update "JobId=$job" "ExcNodeList=n2"
scontrol release "$job"
released=$(date +%s)
note "job $job released: $(field "$job" JobState) Reason=$(field "$job" Reason) StartTime=$(field "$job" StartTime) (released at $(date -u -d "@$released" +%H:%M:%S))"
# The reason shows once the scheduler has looked at the job again.
wait_until 60 reason_is "$job" BeginTime || true
note "job $job: $(field "$job" JobState) Reason=$(field "$job" Reason) StartTime=$(field "$job" StartTime)"
snap_jobs begintime

scontrol update "JobId=$job" "StartTime=now"
wait_until 30 job_is "$job" RUNNING
note "job $job RUNNING again on $(field "$job" NodeList) after StartTime=now"
wait_until 30 both_ranks_up "$jobs/train_$job.log"
snap_jobs requeued_running

touch "$jobs/go-1"
wait_until 30 job_is "$job" COMPLETED
note "job $job COMPLETED ($(field "$job" ExitCode), Restarts=$(field "$job" Restarts))"
snap_jobs completed

scontrol update NodeName=n3 State=DRAIN "Reason=lab drain"
sleep 1
snap_nodes drained
cp "$dir/log/jobcomp.txt" "$out/jobcomp_${release}_cluster_a.txt"
cd "$work"
stop_cluster

# ---- cluster b: a node that stops answering under a running job
start_cluster b
cat > "$jobs/tick.sbatch" <<SCRIPT
#!/bin/bash
#SBATCH --comment='$comment'
#SBATCH -J tick
#SBATCH -N 2
#SBATCH --gpus-per-node=2
#SBATCH -o $jobs/%x_%j.log
echo "attempt \${SLURM_RESTART_COUNT:-0} on \$SLURM_JOB_NODELIST"
srun -l bash -c 'i=0; while :; do i=\$((i + 1)); echo "tick \$i \$(date -u +%T) \$SLURMD_NODENAME"; sleep 1; done'
SCRIPT
cd "$jobs"
job=$(sbatch --parsable tick.sbatch)
wait_until 30 job_is "$job" RUNNING
wait_until 30 log_has "$jobs/tick_$job.log" '^1: tick 2'
note "job $job RUNNING on $(field "$job" NodeList)"

# The processes of the job on n2 (their environment says so) and the slurmstepd above them.
frozen=("$(cat "$dir/slurmd-n2.pid")")
for proc in /proc/[0-9]*; do
    environ=$( { tr '\0' '\n' < "$proc/environ"; } 2>/dev/null) || continue
    if grep -qxF "SLURMD_NODENAME=n2" <<< "$environ" && grep -qxF "SLURM_JOB_ID=$job" <<< "$environ" &&
        grep -qxF "SLURM_CONF=$SLURM_CONF" <<< "$environ"; then
        pid=${proc#/proc/}
        frozen+=("$pid")
        parent=$(awk '{ print $4 }' "$proc/stat")
        if [ "$(cat "/proc/$parent/comm" 2>/dev/null)" = slurmstepd ]; then
            frozen+=("$parent")
        fi
    fi
done
mapfile -t frozen < <(printf '%s\n' "${frozen[@]}" | sort -un)
kill -STOP "${frozen[@]}"
t0=$(date +%s.%N)
note "n2 frozen (SIGSTOP to slurmd and the job's processes: ${frozen[*]}); the timeline restarts here"
last_node='' last_job=''
watch_until() { # watch_until TIMEOUT CONDITION...: notes every change of n2 and of the job
    local timeout=$1
    shift
    local end=$(($(date +%s) + timeout)) node jobline
    while :; do
        node=$(sinfo -h -N -n n2 -o '%T %E' | head -n 1)
        jobline="$(field "$job" JobState) Reason=$(field "$job" Reason) Restarts=$(field "$job" Restarts) NodeList=$(field "$job" NodeList)"
        if [ "$node" != "$last_node" ]; then note "n2: $node"; last_node=$node; fi
        if [ "$jobline" != "$last_job" ]; then note "job $job: $jobline"; last_job=$jobline; fi
        if "$@"; then return 0; fi
        if [ "$(date +%s)" -ge "$end" ]; then echo "timed out waiting for: $*" >&2; return 1; fi
        sleep 1
    done
}
watch_until 120 node_matches n2 '\*$'
snap_nodes node_not_responding
snap_jobs node_not_responding
watch_until 120 requeued_once "$job"
# Reason=None until the scheduler looks at the requeued job again, then BeginTime.
watch_until 30 reason_is "$job" BeginTime || true
snap_jobs node_fail_requeued
snap_nodes node_fail_requeued
note "n2's last tick: $(grep '^1: tick' "$jobs/tick_$job.log" | tail -n 1 || true)"
watch_until 300 job_is "$job" RUNNING
note "job $job RUNNING again by itself on $(field "$job" NodeList)"
wait_until 30 log_has "$jobs/tick_$job.log" '^1: tick 2'
snap_jobs node_fail_rerun
kill -CONT "${frozen[@]}" 2>/dev/null || true
note "n2 thawed"
watch_until 60 answers_again n2 || true
cp "$dir/log/jobcomp.txt" "$out/jobcomp_${release}_cluster_b.txt"
cd "$work"
stop_cluster
dir=
echo "fixtures in $out, work in $work"
