#!/usr/bin/env bash
# Install the Debian packages the platform needs, only those that are missing.
set -euo pipefail
declare -A needed=(
  [bwrap]=bubblewrap [pg_ctlcluster]=postgresql [node]=nodejs [npm]=npm
  [nginx]=nginx-light [envsubst]=gettext-base [mkfs.ext4]=e2fsprogs
)
missing=()
for command in "${!needed[@]}"; do
  command -v "$command" >/dev/null 2>&1 || missing+=("${needed[$command]}")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "error: missing system packages: ${missing[*]}; install them with your package manager" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "error: missing system packages ${missing[*]} and no root/sudo to install them" >&2
    exit 1
  fi
  sudo="sudo"
fi
echo "installing system packages: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
