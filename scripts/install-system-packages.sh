#!/usr/bin/env bash
# Install the Debian packages the platform needs, only those that are missing, and
# Docker Compose v2 for Harbor's docker environment when `docker compose` lacks it.
set -euo pipefail
project="$(cd "$(dirname "$0")/.." && pwd)"
declare -A needed=(
  [bwrap]=bubblewrap [pg_ctlcluster]=postgresql [node]=nodejs [npm]=npm
  [mkfs.ext4]=e2fsprogs [mmdebstrap]=mmdebstrap [dockerd]=docker.io [chromium]=chromium
)
missing=()
for command in "${!needed[@]}"; do
  command -v "$command" >/dev/null 2>&1 || missing+=("${needed[$command]}")
done
compose_dir="$project/.tools/docker"
compose_plugin="$compose_dir/cli-plugins/docker-compose"
# The platform's docker environment finds the plugin through this directory
# (synth_pipelines/services/dockerd.py); a `docker compose` already on the host works too.
needs_compose() {
  [ ! -x "$compose_plugin" ] && ! docker compose version >/dev/null 2>&1
}
if [ ${#missing[@]} -eq 0 ] && ! needs_compose; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  needs_compose && missing+=("Docker Compose v2")
  echo "error: missing system packages: ${missing[*]}; install them with your package manager" >&2
  exit 1
fi
if [ ${#missing[@]} -gt 0 ]; then
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
fi
if needs_compose; then
  # Compose v2 is packaged for Debian from trixie on (docker-compose 2.x, one static
  # binary): fetch that .deb through a trixie source used only for this download, with
  # its own lists, and unpack it into the project; the system's apt is left as it was.
  echo "installing Docker Compose v2 into ${compose_dir#"$project"/}"
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  mkdir -p "$scratch/lists/partial" "$scratch/cache/archives/partial"
  echo "deb http://deb.debian.org/debian trixie main" >"$scratch/sources.list"
  apt_options=(
    -o "Dir::Etc::SourceList=$scratch/sources.list" -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State::Lists=$scratch/lists" -o "Dir::Cache=$scratch/cache"
    -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Sandbox::User=$(id -un)"
  )
  apt-get "${apt_options[@]}" update -qq
  (cd "$scratch" && apt-get "${apt_options[@]}" download -qq docker-compose)
  rm -rf "$compose_dir"
  mkdir -p "$compose_dir/cli-plugins"
  dpkg -x "$scratch"/docker-compose_*.deb "$compose_dir"
  ln -sfn ../usr/libexec/docker/cli-plugins/docker-compose "$compose_plugin"
  DOCKER_CONFIG="$compose_dir" docker compose version >/dev/null
fi
