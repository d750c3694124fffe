"""The kernel's per-user budgets (inotify instances, POSIX message-queue bytes, pending
signals, locked memory) are each sandbox's own: a sandbox that spends all of one leaves
another, running at the same time, its whole budget.

The kernel charges what a process inside creates to its user namespace and then to
the host id that owns that namespace; were every sandbox's namespace owned by one host
id, one attempt could take the host's 128 inotify instances and leave none to the
attempt beside it.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest
from sandbox_support import isolated_state, make_environment, make_task

from synth_pipelines.sandbox.userns import HOST_ID_BASE, ID_COUNT

# Creates inotify instances until the kernel refuses one, then POSIX message queues
# until it refuses one; writes how many of each and the refusals' errno names to
# HELD, then keeps them all open.
HOLD = """
import ctypes, errno, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
instances = 0
while libc.inotify_init1(0) >= 0:
    instances += 1
refused = errno.errorcode[ctypes.get_errno()]
queues = 0
while libc.mq_open(b"/held-%d" % queues, os.O_CREAT | os.O_RDWR, 0o600, None) >= 0:
    queues += 1
queue_refused = errno.errorcode[ctypes.get_errno()]
with open("/tmp/held.part", "w") as held:
    held.write(f"{instances} {refused} {queues} {queue_refused}")
os.rename("/tmp/held.part", "/tmp/held")
time.sleep(600)
"""
# Whether this sandbox may still create an inotify instance and a message queue.
PROBE = """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
def outcome(result):
    return "ok" if result >= 0 else errno.errorcode[ctypes.get_errno()]
queue = libc.mq_open(b"/probe", os.O_CREAT | os.O_RDWR, 0o600, None)
print(outcome(libc.inotify_init1(0)), outcome(queue))
"""
HOLD_COMMAND = (
    f"python3 -c {shlex.quote(HOLD)} >/dev/null 2>&1 & "
    "for _ in $(seq 600); do [ -s /tmp/held ] && break; sleep 0.05; done; cat /tmp/held"
)
PROBE_COMMAND = f"python3 -c {shlex.quote(PROBE)}"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    yield from isolated_state(tmp_path, monkeypatch)


def test_a_sandbox_that_exhausts_its_budgets_leaves_another_its_own(tmp_path):
    first = make_environment(make_task(tmp_path, "budget-first"), tmp_path / "first")
    second = make_environment(make_task(tmp_path, "budget-second"), tmp_path / "second")

    async def go():
        try:
            await first.start(force_build=False)
            await second.start(force_build=False)
            held = await first.exec(HOLD_COMMAND)
            probe = await second.exec(PROBE_COMMAND)
            return held, probe
        finally:
            await first.stop(delete=True)
            await second.stop(delete=True)

    held, probe = asyncio.run(go())
    instances, refused, queues, queue_refused = held.stdout.split()
    # The first sandbox got the host's whole per-user budget, and no more than that.
    host_limit = int(Path("/proc/sys/user/max_inotify_instances").read_text())
    assert (int(instances), refused) == (host_limit, "EMFILE"), held
    assert int(queues) > 0 and queue_refused == "EMFILE", held
    # The second, at the same time, still has its own.
    assert probe.stdout.split() == ["ok", "ok"], probe


def test_each_running_sandbox_has_its_own_namespace_owner_until_it_stops(tmp_path):
    first = make_environment(make_task(tmp_path, "owner-first"), tmp_path / "first")
    second = make_environment(make_task(tmp_path, "owner-second"), tmp_path / "second")

    async def go():
        try:
            await first.start(force_build=False)
            await second.start(force_build=False)
            inits = [first._init, second._init]
            maps = [(await env.exec("cat /proc/self/uid_map")).stdout for env in (first, second)]
            return maps, inits
        finally:
            await first.stop(delete=True)
            await second.stop(delete=True)

    maps, inits = asyncio.run(go())
    owners = [int(mapping.split()[-2]) for mapping in maps]
    assert owners[0] != owners[1], maps
    # Neither is one of the ids the sandboxes share (and their images' files keep).
    assert not any(HOST_ID_BASE <= owner < HOST_ID_BASE + ID_COUNT - 1 for owner in owners), maps
    # Each gave its id back once everything in it had ended.
    assert [init.owner.descriptor for init in inits] == [-1, -1]
