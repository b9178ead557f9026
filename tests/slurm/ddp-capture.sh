#!/usr/bin/env bash
# Runs the lab's PyTorch DDP job (ddp.sbatch, ddp_train.py) on a lab cluster of RELEASE, once per case,
# and keeps each job's log as OUTDIR/ddp_<release>_<case>.log.
#
#   tests/slurm/ddp-capture.sh RELEASE OUTDIR [CASE...]      RELEASE: 22.05 or 24.11
#
# Cases: none (a complete run), usr1 (SIGUSR1 mid-run), kill, stop, error, cpu_oom (the fault fires on the
# first run only; the failed job is then requeued the way runguard does it - requeuehold, release,
# StartTime=now - and its second run resumes from the newest checkpoint and completes). The job log is
# opened in append mode, so one log holds both runs. The duration of each case goes to
# OUTDIR/ddp_<release>.timings.
#
# ITERS (30), CKPT_EVERY (10), STEP_SECS (0.5), DDP_TIMEOUT (10) and DDP_FAULT_AT (15) pass through.
set -euo pipefail

release=${1:-}
out=${2:-}
if [ -z "$release" ] || [ -z "$out" ]; then
    echo "usage: $0 22.05|24.11 OUTDIR [none usr1 kill stop error cpu_oom]" >&2
    exit 2
fi
shift 2
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(none usr1 kill stop error cpu_oom)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "/tmp/ddp-$release.XXXXXX")
chmod 755 "$work"
dir="$work/slurm"
timings="$out/ddp_$release.timings"

export ITERS=${ITERS:-30} CKPT_EVERY=${CKPT_EVERY:-10} STEP_SECS=${STEP_SECS:-0.5}
export DDP_TIMEOUT=${DDP_TIMEOUT:-10} DDP_FAULT_AT=${DDP_FAULT_AT:-15}
export DDP_TRAIN="$here/ddp_train.py"

RUNGUARD_SLURM_BINDS="$work" bash "$here/cluster.sh" start "$dir" "$release" >/dev/null
trap 'bash "$here/cluster.sh" stop "$dir"' EXIT
export SLURM_CONF="$dir/slurm.conf"
if [ "$release" = 24.11 ]; then
    export PATH="$dir/bin:$PATH"
fi

field() { scontrol show job -o "$1" | tr ' ' '\n' | awk -F= -v k="$2" '$1 == k { sub(/^[^=]*=/, ""); print; exit }'; }
ended() {
    case "$(field "$1" JobState)" in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) return 0 ;;
    esac
    return 1
}
wait_ended() {
    local end=$(($(date +%s) + $2))
    until ended "$1"; do
        if [ "$(date +%s)" -ge "$end" ]; then
            echo "job $1 did not end within $2 s" >&2
            return 1
        fi
        sleep 0.5
    done
}
# The job's log holds a line matching PATTERN.
wait_log() {
    local end=$(($(date +%s) + $3))
    until grep -q -- "$2" "$1" 2>/dev/null; do
        if [ "$(date +%s)" -ge "$end" ]; then
            echo "no '$2' in $1 within $3 s" >&2
            return 1
        fi
        sleep 0.2
    done
}

: > "$timings"
for case in "${cases[@]}"; do
    ckpt="$work/ckpt-$case"
    log="$work/ddp-$case.log"
    mkdir -p "$ckpt"
    fault=$case
    case "$case" in none | usr1) fault=none ;; esac
    started=$(date +%s.%N)
    job=$(cd "$work" && CKPT_DIR="$ckpt" DDP_FAULT="$fault" sbatch --parsable --open-mode=append -o "$log" "$here/ddp.sbatch")
    if [ "$case" = usr1 ]; then
        wait_log "$log" "iteration  *12/" 120
        scancel --signal=USR1 "$job"
    fi
    wait_ended "$job" 180
    first=$(date +%s.%N)
    summary="$case: job $job run 1 $(field "$job" JobState) $(field "$job" ExitCode) in $(awk -v a="$first" -v b="$started" 'BEGIN { printf "%.1f", a - b }') s"
    if [ "$fault" != none ]; then
        scontrol requeuehold "$job"
        until [ "$(field "$job" JobState)" = PENDING ]; do sleep 0.2; done
        # slurmd refuses to launch a job id in the second its credential was revoked.
        sleep 2
        scontrol release "$job"
        scontrol update "JobId=$job" StartTime=now
        wait_ended "$job" 180
        second=$(date +%s.%N)
        summary="$summary; requeued, run 2 $(field "$job" JobState) $(field "$job" ExitCode) Restarts=$(field "$job" Restarts) in $(awk -v a="$second" -v b="$first" 'BEGIN { printf "%.1f", a - b }') s"
    fi
    echo "$summary" | tee -a "$timings"
    cp "$log" "$out/ddp_${release}_$case.log"
done
