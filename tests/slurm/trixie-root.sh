#!/usr/bin/env bash
# A Debian trixie root holding Slurm 24.11 (slurm-wlm, slurmrestd, the auth/jwt plugin) and PyTorch
# (python3-torch), for
# `tests/slurm/cluster.sh start DIR 24.11`.
#
#   tests/slurm/trixie-root.sh [ROOT]    ROOT defaults to ${RUNGUARD_SLURM_ROOT:-/var/cache/runguard/trixie-root}
#
# Built once with debootstrap (minbase) from the Debian mirror apt already uses; a root that is already
# complete is left as it is. Needs root and debootstrap.
#
#   RUNGUARD_DEBIAN_MIRROR   the mirror (default: the first Debian archive in /etc/apt/sources.list*)
#   RUNGUARD_TRIXIE_TORCH=0  leave python3-torch out (about 1 GB less; the DDP job then cannot run)
set -euo pipefail

root=${1:-${RUNGUARD_SLURM_ROOT:-/var/cache/runguard/trixie-root}}
marker=etc/runguard-lab-root

case "$root" in
    /*) ;;
    *) root="$(pwd)/$root" ;;
esac
root=${root%/}
if [ -z "$root" ] || [ "$root" = / ]; then
    echo "refusing to build in /" >&2
    exit 2
fi

if [ -f "$root/$marker" ] && [ -x "$root/usr/sbin/slurmctld" ] && [ -e "$root/usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so" ]; then
    echo "$root: $(cat "$root/$marker") (already built)"
    exit 0
fi
if [ -e "$root" ] && [ -n "$(ls -A "$root" 2>/dev/null)" ]; then
    echo "$root exists, is not empty and is not a finished lab root: remove it first" >&2
    exit 1
fi
if [ "$(id -u)" != 0 ]; then
    echo "building the root needs root (debootstrap, chroot)" >&2
    exit 1
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing (apt-get install debootstrap)" >&2; exit 3; }

# The Debian archive apt already uses: a `URIs:` line of a deb822 file or a `deb URL SUITE` line,
# whichever comes first, that is not the security archive.
mirror() {
    local file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
        [ -f "$file" ] || continue
        awk '
            /^[[:space:]]*#/ { next }
            $1 == "URIs:" { for (i = 2; i <= NF; i++) print $i }
            $1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; break } }
        ' "$file"
    done | grep -E '/debian/?$' | grep -v -- '-security' | head -n 1
}
mirror=${RUNGUARD_DEBIAN_MIRROR:-$(mirror)}
mirror=${mirror:-http://deb.debian.org/debian}

# The JWT plugin lets the controller verify the tokens of the slurmrestd tests.
packages=slurm-wlm,slurmrestd,slurm-wlm-jwt-plugin
if [ "${RUNGUARD_TRIXIE_TORCH:-1}" != 0 ]; then
    packages="$packages,python3-torch"
fi

partial="$root.partial"
# A build that failed half-way may have left debootstrap's mounts (proc, sys) in the partial root.
if [ -d "$partial" ]; then
    awk -v p="$partial/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mounted; do
        umount -l -- "$mounted" || true
    done
    rm -rf --one-file-system -- "$partial"
fi
mkdir -p -- "$partial"
echo "debootstrap trixie into $partial from $mirror ($packages)"
started=$(date +%s)
if ! debootstrap --variant=minbase --include="$packages" trixie "$partial" "$mirror" >"$partial.log" 2>&1; then
    echo "debootstrap failed; the end of its log ($partial.log):" >&2
    tail -n 30 "$partial.log" >&2
    exit 1
fi

# Name resolution for localhost (cluster.sh also binds the host's /etc/hosts over it while running).
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$partial/etc/hosts"
chroot "$partial" apt-get clean
rm -rf -- "$partial/var/lib/apt/lists/"*

# The root's own path leads to its / from inside as well, so that one PluginDir (ROOT/usr/lib/...)
# serves the daemons inside and the client commands run from outside through the root's loader.
mkdir -p -- "$partial$(dirname -- "$root")"
ln -s / "$partial$root"

# shellcheck disable=SC2016 # dpkg-query's own format
version=$(chroot "$partial" dpkg-query -W -f='${Version}' slurmctld)
# shellcheck disable=SC2016
torch=$(chroot "$partial" dpkg-query -W -f='${Version}' python3-torch 2>/dev/null || echo none)
printf 'slurm %s, python3-torch %s, debootstrap trixie from %s\n' "$version" "$torch" "$mirror" > "$partial/$marker"
rm -f -- "$partial.log"
rmdir -- "$root" 2>/dev/null || true
mv -- "$partial" "$root"
echo "$root: $(cat "$root/$marker") (built in $(($(date +%s) - started)) s, $(du -smx "$root" | cut -f1) MB)"
