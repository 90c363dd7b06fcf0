#!/usr/bin/env bash
# The robot's deploy image on arm64 under emulation (issue 55): installs the host's tools from
# Debian's packages where missing (qemu-user-static, proot, debootstrap; cyclonedds-dev for the
# twin's 0.10.2 binding; needs root or sudo), then runs tools/aarch64_check.py, which builds
# (and caches) an arm64 Debian root, installs the deploy side into it with jetson/deploy.sh and
# runs doctor, a CartPole bundle and the G1 plant against the host's twin inside it. Writes
# docs/benchmarks/aarch64_deploy.{json,md}.
#
#   bash tools/aarch64_check.sh [--fresh] [--cache DIR]    (after `make install`)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v proot >/dev/null || need+=(proot)
command -v debootstrap >/dev/null || [[ -x /usr/sbin/debootstrap ]] || need+=(debootstrap)
compgen -G "/usr/lib/*/libddsc.so" >/dev/null || need+=(cyclonedds-dev)
if ((${#need[@]})); then
  sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    sudo=(sudo)
  fi
  echo "aarch64_check: installing ${need[*]} (Debian's packages)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
export PATH="/usr/sbin:$PATH"
if [[ ! -x "$repo/.venv/bin/python" ]]; then
  echo "aarch64_check: the host's venv is missing: run make install first" >&2
  exit 2
fi
exec "$repo/.venv/bin/python" "$repo/tools/aarch64_check.py" "$@"
