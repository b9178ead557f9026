#!/usr/bin/env bash
# A stand-in for a Megatron training run, for the Slurm end-to-end tests. Run under `srun -l`, so that
# every line gets its rank prefix. It resumes from the newest checkpoint file in CKPT_DIR, logs
# Megatron-style progress lines, saves a checkpoint every CKPT_EVERY iterations, and fails as told:
#
#   ITERS=30 CKPT_EVERY=10 STEP_SECS=0.05   the run
#   FAIL=none|nccl|ib_hang|exception|hang   how it fails (ib_hang: the IB completion error, then every rank
#                                           hangs in the collective instead of reaching the watchdog)
#   FAIL_AT=15                              at which iteration
#   FAIL_ON=first|always                    on the run's first attempt only (requeued or resubmitted, the
#                                           next attempts find the mark it leaves in CKPT_DIR), or on every one
#   FAIL_NODE=n2                            for nccl and ib_hang: the node whose rank reports the broken link (default:
#                                           the node of the last rank; `every`: every rank reports it)
set -u

rank=${SLURM_PROCID:-0}
ranks=${SLURM_NTASKS:-1}
node=${SLURMD_NODENAME:-$(hostname)}
iters=${ITERS:-30}
every=${CKPT_EVERY:-10}
step=${STEP_SECS:-0.05}
fail=${FAIL:-none}
fail_at=${FAIL_AT:-15}
fail_on=${FAIL_ON:-first}
ckpt_dir=${CKPT_DIR:?CKPT_DIR must name the checkpoint directory}
last_rank=$((ranks - 1))

start=0
newest=$(ls "$ckpt_dir" 2>/dev/null | grep '^iter_[0-9]*$' | sort | tail -n 1)
if [ -n "$newest" ]; then
    start=$((10#${newest#iter_}))
    if [ "$rank" = 0 ]; then
        echo " loading checkpoint from $ckpt_dir at iteration $start"
        echo "  successfully loaded checkpoint from $ckpt_dir [ t 0/1, p 0/1 ] at iteration $start"
    fi
fi

# The mark names the run that failed (job id and restart count): a rank of that same run that starts
# late, after another rank already failed and left the mark, fails too; a requeued or resubmitted run
# does not.
run_id="${SLURM_JOB_ID:-0}.${SLURM_RESTART_COUNT:-0}"
mark="$ckpt_dir/.failed_once"
failing=0
if [ "$fail" != none ] && { [ "$fail_on" = always ] || [ ! -e "$mark" ] || [ "$(cat "$mark" 2>/dev/null)" = "$run_id" ]; }; then
    failing=1
fi

for ((i = start + 1; i <= iters; i++)); do
    if [ "$failing" = 1 ] && [ "$i" = "$fail_at" ]; then
        # Written whole, then renamed: a rank starting now reads the mark complete or not at all.
        printf '%s\n' "$run_id" > "$mark.$rank" && mv -f "$mark.$rank" "$mark"
        case "$fail" in
            nccl)
                culprit=${FAIL_NODE:-}
                if [ "$culprit" = every ] || { [ -n "$culprit" ] && [ "$node" = "$culprit" ]; } || { [ -z "$culprit" ] && [ "$rank" = "$last_rank" ]; }; then
                    echo "$node:4242:4243 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
                fi
                sleep 1
                echo "[Rank $rank] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=$i, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600050 milliseconds before timing out."
                exit 1
                ;;
            ib_hang)
                culprit=${FAIL_NODE:-}
                if [ "$culprit" = every ] || { [ -n "$culprit" ] && [ "$node" = "$culprit" ]; } || { [ -z "$culprit" ] && [ "$rank" = "$last_rank" ]; }; then
                    echo "$node:4242:4243 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
                fi
                sleep 600
                exit 0
                ;;
            exception)
                if [ "$rank" = 0 ]; then
                    printf 'Traceback (most recent call last):\n  File "/workspace/pretrain_gpt.py", line 245, in <module>\n    mask = batch["attention_mask"]\nKeyError: %s\n' "'attention_mask'"
                fi
                exit 1
                ;;
            hang)
                # Silent from here on, as a rank stuck in a collective is.
                sleep 600
                exit 0
                ;;
        esac
    fi
    sleep "$step"
    if [ "$rank" = "$last_rank" ]; then
        printf ' [%s] iteration %8d/%8d | consumed samples: %12d | elapsed time per iteration (ms): %.1f | throughput per GPU (TFLOP/s/GPU): %.1f | learning rate: 3.000000E-04 | lm loss: %s | loss scale: 1.0 | grad norm: 1.000 | number of skipped iterations:   0 | number of nan iterations:   0 |\n' \
            "$(date '+%Y-%m-%d %H:%M:%S')" "$i" "$iters" "$((i * 512))" 50.0 400.0 "$(awk -v i="$i" 'BEGIN { printf "%.6E", 8 / (i + 1) }')"
    fi
    if [ $((i % every)) = 0 ]; then
        # Every rank waits for the save, as the ranks of a real run do at a checkpoint barrier.
        if [ "$rank" = 0 ]; then
            echo "saving checkpoint at iteration $i to $ckpt_dir"
            printf 'iteration=%d\n' "$i" > "$ckpt_dir/.iter_$i.tmp"
            mv "$ckpt_dir/.iter_$i.tmp" "$ckpt_dir/$(printf 'iter_%07d' "$i")"
            echo "  successfully saved checkpoint from iteration $i to $ckpt_dir [ t 0/1, p 0/1 ]"
        fi
        sleep "$step"
    fi
done
exit 0
