"""What a shared verifier finds of the agent's state, and what it does not.

Harbor's default verifier mode is shared: the task's tests run in the agent's sandbox,
right after the agent, to grade the work it left. The work (the workdir, the task's
artifacts) must stay; what the verifier's own tools read on the way must not be the
agent's. Before the verifier starts (`BwrapEnvironment.end_agent_phase`):

- every process of the sandbox but its init is killed, so nothing the agent started
  runs beside the verifier (`verification.py`);
- `/logs/verifier` (where the reward is read) and `/tests` (where Harbor uploads the
  tests: a `conftest.py` or a script the agent planted there would run with them) are
  emptied;
- the scratch directories below are emptied: files the agent left there (sockets,
  named pipes, modules on a `sys.path` entry a test adds, lock files) are gone; what
  the platform mounted there (a host bind under `/tmp`, as a checkout in the system
  temp directory gives the harness's runtime, and earlier verifiers' homes) stays, with
  the directories that lead to it;
- these resets run as root over the sandbox's files (`identity.FILE_ROOT`), so a
  read-only directory or a file the agent made unreadable cannot stop them (before,
  that left the verifier's reset failing and the attempt out of pass@1);
- every later command runs with a HOME of its own (`verifier_home_dir`, made fresh
  in the emptied `/tmp`), which holds the image's home for that user as the image
  built it (a copy-on-write overlay of the image's layers; an empty directory on the
  host root, whose homes start empty): what the agent left in its home (a `.pth` file
  in the user site-packages, which runs in every `python3` that starts and once made
  an honest check exit 0; shell start-up files; git's, pip's and npm's configuration)
  is not where the verifier's tools look.

The verifier's own processes are never the agent's: each is forked by the sandbox's
launch server from the host, enters the init's namespaces and execs `bash` with the
environment Harbor and the image give (never one an agent process passes on), after the
kill above left no agent process to inherit from, signal or trace it.

What stays: the work itself, and whatever else the agent's user could write outside
its home. An agent that runs as root (most images' default user) could rewrite the
image's own tools (system site-packages, `/usr/local/bin`, `/etc`), and a tool the
image put on `PATH` by its home's absolute path (a `.local/bin` in root's home) is found where the
agent left it. A task whose verdict must not depend on those grades in a separate
verifier environment (`[verifier] environment_mode = "separate"`), which starts from
the image and receives only the task's declared artifacts.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")


VERIFIER_HOMES = ".verifier-home-"


def verifier_home_dir(verification: int, uid: int) -> str:
    """HOME of the commands of a task's `verification`th shared verifier run as `uid`
    (a new one each time: an earlier one stays mounted, out of use, as the next step's
    agent left it)."""
    return f"/tmp/{VERIFIER_HOMES}{verification}-{uid}"


def scratch_reset_script(mounted: Sequence[str]) -> str:
    """A bash script that empties each of `SCRATCH_DIRS` the sandbox has (kept sticky and
    world-writable), but for the paths in `mounted` and the directories leading to them,
    and for earlier verifiers' homes in `/tmp`; exit status 1 when something it had to
    remove could not be."""
    protected = " ".join(shlex.quote(path) for path in mounted)
    return f"""shopt -s dotglob nullglob
mounted=({protected})
clear_but_mounts() {{
  local entry path keep descend
  for entry in "$1"/*; do
    keep= descend=
    case "$entry" in /tmp/{VERIFIER_HOMES}*) continue ;; esac
    for path in "${{mounted[@]}}"; do
      if [ "$entry" = "$path" ]; then keep=1
      elif [ "${{path#"$entry"/}}" != "$path" ]; then descend=1; fi
    done
    if [ -n "$keep" ]; then continue; fi
    if [ -n "$descend" ] && [ -d "$entry" ] && [ ! -L "$entry" ]; then
      clear_but_mounts "$entry" || return 1
    else
      rm -rf -- "$entry" || return 1
    fi
  done
}}
for scratch in {" ".join(SCRATCH_DIRS)}; do
  if [ -d "$scratch" ] && [ ! -L "$scratch" ]; then
    clear_but_mounts "$scratch" && chmod 1777 "$scratch" || exit 1
  fi
done
"""
