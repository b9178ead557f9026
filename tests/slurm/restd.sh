#!/usr/bin/env bash
# slurmrestd for a cluster started by tests/slurm/cluster.sh, for the integration tests.
#
#   tests/slurm/restd.sh start DIR [RELEASE]             unix socket DIR/rest/rest.sock, rest_auth/local
#   tests/slurm/restd.sh start DIR [RELEASE] --tcp PORT  127.0.0.1:PORT, rest_auth/jwt (X-SLURM-USER-* headers)
#   tests/slurm/restd.sh stop DIR
#
# RELEASE (22.05 or 24.11) defaults to the one cluster.sh started in DIR:
#   22.05  the host's slurmrestd, `-s openapi/v0.0.38`: /slurm/v0.0.38/...
#   24.11  DIR/bin/slurmrestd (the trixie root's), `-s openapi/slurmctld`: /slurm/v0.0.40/...,
#          /slurm/v0.0.41/... and /slurm/v0.0.42/... (data_parser v0.0.40..v0.0.42)
# RUNGUARD_SLURMRESTD_PLUGINS replaces the `-s` list; RUNGUARD_SLURMRESTD_PARSERS (24.11: `-d`, e.g.
# `v0.0.40`) limits the data parsers, and with them the /slurm/vX/ paths served.
#
# slurmrestd refuses to run as root, so it runs as nobody: every request acts with nobody's identity
# (rest_auth/local takes the daemon's own uid; with AuthType=auth/none a JWT is passed on unverified).
# On a cluster started with RUNGUARD_SLURM_JWT_KEY (AuthAltTypes=auth/jwt in slurm.conf), --tcp runs
# slurmrestd with SLURM_JWT=daemon: its requests then carry the caller's token as their credential and
# slurmctld verifies it (a token signed with another key, expired or malformed is refused), and each
# request acts as the token's user.
# Only the controller plugin is loaded: the default set dies without slurmdbd (22.05: "slurm not
# configured with slurmdbd"; 24.11: "Failure loading plugin path bindings").
# The pid goes to DIR/slurmrestd.pid, so `cluster.sh stop DIR` ends a slurmrestd left running too.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
    echo "usage: $0 start DIR [22.05|24.11] [--tcp PORT] | stop DIR" >&2
    exit 2
fi
dir=$(cd "$dir" && pwd)
conf="$dir/slurm.conf"
export SLURM_CONF="$conf"
release=
if [ "$cmd" = start ]; then
    case "${3:-}" in
        22.05 | 24.11) release=$3 ;;
        "" | --tcp) ;;
        *) echo "unknown release $3 (22.05 or 24.11)" >&2; exit 2 ;;
    esac
fi
if [ -z "$release" ] && [ -f "$dir/release" ]; then
    release=$(cat "$dir/release")
fi
release=${release:-22.05}
case "$release" in
    22.05)
        plugins=openapi/v0.0.38
        api=v0.0.38
        ;;
    24.11)
        plugins=openapi/slurmctld
        api=v0.0.42
        # The root's slurmrestd, run through its loader (cluster.sh start wrote it).
        export PATH="$dir/bin:$PATH"
        ;;
esac
plugins=${RUNGUARD_SLURMRESTD_PLUGINS:-$plugins}
# The readiness check pings the last version asked for.
case "$plugins" in
    *openapi/v0.0.*) api=${plugins##*/} ;;
esac
pidfile="$dir/slurmrestd.pid"
as_nobody=(setpriv --reuid=nobody --regid=nogroup --clear-groups)

start() {
    local listen auth socket="" port=""
    if [ "${1:-}" = "--tcp" ]; then
        port=${2:?"--tcp needs a port"}
        listen="127.0.0.1:$port"
        auth=rest_auth/jwt
    else
        socket="$dir/rest/rest.sock"
        listen="unix:$socket"
        auth=rest_auth/local
    fi
    if [ "$release" = 24.11 ] && [ ! -x "$dir/bin/slurmrestd" ]; then
        echo "no $dir/bin/slurmrestd: start the cluster with tests/slurm/cluster.sh start $dir 24.11" >&2
        exit 1
    fi
    command -v slurmrestd >/dev/null || { echo "slurmrestd is not installed (apt-get install slurmrestd)" >&2; exit 3; }
    [ -f "$conf" ] || { echo "no $conf: start the cluster first (tests/slurm/cluster.sh start $dir)" >&2; exit 1; }
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        echo "slurmrestd already runs for $dir (pid $(cat "$pidfile"))" >&2
        exit 1
    fi
    # nobody must read slurm.conf, so every directory above it must let others through.
    if ! "${as_nobody[@]}" test -r "$conf"; then
        echo "user nobody cannot read $conf: make $dir and the directories above it world-searchable (chmod o+x)" >&2
        exit 1
    fi
    mkdir -p "$dir/rest" "$dir/log"
    chown nobody:nogroup "$dir/rest"
    rm -f "$dir/rest/rest.sock"
    local jwt=()
    if [ -n "$port" ] && grep -q '^AuthAltTypes=.*auth/jwt' "$conf"; then
        jwt=(env SLURM_JWT=daemon)
    fi
    local parsers=()
    if [ -n "${RUNGUARD_SLURMRESTD_PARSERS:-}" ]; then
        parsers=(-d "$RUNGUARD_SLURMRESTD_PARSERS")
        api=$RUNGUARD_SLURMRESTD_PARSERS
        api=${api%%,*}
        api=${api#data_parser/}
    fi
    "${as_nobody[@]}" "${jwt[@]}" slurmrestd -f "$conf" -s "$plugins" "${parsers[@]}" -a "$auth" "$listen" \
        >"$dir/log/slurmrestd.log" 2>&1 &
    echo $! > "$pidfile"
    for _ in $(seq 1 100); do
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            echo "slurmrestd exited; its log:" >&2
            cat "$dir/log/slurmrestd.log" >&2
            rm -f "$pidfile"
            exit 1
        fi
        if answers; then
            return 0
        fi
        sleep 0.1
    done
    echo "slurmrestd did not answer /slurm/$api/ping; log in $dir/log/slurmrestd.log" >&2
    stop
    exit 1
}

# Whether slurmrestd answers a ping (without curl: whether its socket exists).
answers() {
    local token=unverified
    if [ ${#jwt[@]} -gt 0 ]; then
        token=$(scontrol token username=nobody lifespan=60 2>/dev/null | sed -n 's/^SLURM_JWT=//p')
    fi
    local headers=(-H "X-SLURM-USER-NAME: nobody" -H "X-SLURM-USER-TOKEN: $token")
    if ! command -v curl >/dev/null; then
        if [ -n "$socket" ]; then
            [ -S "$socket" ]
        else
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
        fi
        return
    fi
    if [ -n "$socket" ]; then
        curl -sf --max-time 5 --unix-socket "$socket" "http://slurmrestd/slurm/$api/ping" >/dev/null 2>&1
    else
        curl -sf --max-time 5 "${headers[@]}" "http://$listen/slurm/$api/ping" >/dev/null 2>&1
    fi
}

stop() {
    [ -f "$pidfile" ] || return 0
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 20); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile" "$dir/rest/rest.sock"
}

case "$cmd" in
    start)
        shift 2
        case "${1:-}" in 22.05 | 24.11) shift ;; esac
        start "$@"
        ;;
    stop) stop ;;
    *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
