#!/bin/sh
# The entry point of the project's image (synth_pipelines/services/project_image.py): what
# a run worker container starts with before Dagster's command.
#
# Docker masks parts of /proc by mounting over them, and the kernel refuses a new proc
# mount (each sandbox has its own) while anything is mounted over the existing one: the
# worker lifts those masks, as `docker run --security-opt systempaths=unconfined` would
# (Dagster's launcher can only pass what the Docker API takes, which has no such option).
#
# Docker mounts a container's cgroup hierarchies read-only, and the bubblewrap sandboxes
# of the worker's trials enforce their tasks' `cpus` and `memory_mb` with cgroups. With
# CAP_SYS_ADMIN (the Docker deployment's launcher grants it) the worker mounts writable
# views of the controllers it needs; without it the sandboxes run with those limits
# unenforced and log that they are.
set -u
awk '$2 ~ /^\/proc\// {print $2}' /proc/self/mounts | sort -r | while read -r path; do
    umount "$path" 2>/dev/null || true
done
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    # cgroup v2: the container's own cgroup namespace, made writable.
    mount -o remount,rw /sys/fs/cgroup 2>/dev/null || true
else
    # cgroup v1: one hierarchy per controller, mounted where the sandbox finds it.
    for controller in cpu memory pids; do
        target="/run/synth-cgroup/$controller"
        mkdir -p "$target"
        mount -t cgroup -o "$controller" "synth-$controller" "$target" 2>/dev/null \
            || rmdir "$target"
    done
fi
exec "$@"
