#!/usr/bin/env bash
# Makes screenshots/*.svg: the cockpit on the simulated cluster's demo (the NCCL timeout on node-07),
# driven in tmux, each pane captured with its colours and turned into an image by ansi2svg.py.
#
#   bash screenshots/make.sh            (builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=$PWD/target/release/runguard
work=$(mktemp -d)
trap 'tmux -S "$work/tmux.sock" kill-server 2>/dev/null || true; rm -rf "$work"' EXIT
printf '[sim]\nspeed = 300.0\n' > "$work/config.toml"
tmux -S "$work/tmux.sock" new-session -d -x 120 -y 36 -s shot \
    "env XDG_CONFIG_HOME=$work/config XDG_DATA_HOME=$work/data USER=alice $bin --config $work/config.toml --db $work/runguard.sqlite"

wait_for() {
    for _ in $(seq 1 300); do
        if tmux -S "$work/tmux.sock" capture-pane -p -t shot | grep -q "$1"; then return 0; fi
        sleep 0.2
    done
    echo "never saw: $1" >&2
    exit 1
}
keys() { tmux -S "$work/tmux.sock" send-keys -t shot "$@"; sleep 0.8; }
shot() {
    tmux -S "$work/tmux.sock" capture-pane -e -p -t shot > "$work/$1.txt"
    python3 screenshots/ansi2svg.py "$work/$1.txt" "screenshots/$1.svg" 120 36
    echo "screenshots/$1.svg"
}

wait_for "Appr (2)"
shot overview
keys Enter; shot details
keys 5; shot approvals
keys a; wait_for "done     requeue"; shot approvals-done
keys 1; wait_for "COMPLETED"
keys 3; shot charts
keys 4; shot timeline
keys 7; shot log
keys 6 A; shot notifications
keys 1 Space j Space 8; shot compare
keys '?'; shot help
keys Escape 1
