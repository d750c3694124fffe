"""Polls of one run's results that arrive together share one read (`gateway/shared_reads.py`):
each key still checked, each answer read after its poll arrived, a lone poll not delayed."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from sqlalchemy import event

from gateway.shared_reads import SharedReads
from tests.gateway_support import bearer, gateway


def test_polls_arriving_together_share_one_read_and_each_key_is_checked(state):
    with gateway(results_gather_sec=0.3, results_hot_polls=1) as gw:
        alice, bob = gw.key("alice", role="viewer"), gw.key("bob", role="viewer")
        revoked = gw.key("alice", role="viewer")
        admin = gw.key("root", role="admin")
        run = gw.run("alice")
        httpx.delete(f"{gw.url}/v1/keys/{revoked.split('_')[1]}", headers=bearer(admin))
        url = f"{gw.url}/v1/runs/{run.run_id}/results"
        # The run's document, built and kept by a first poll.
        first = httpx.get(url, headers=bearer(alice))
        assert first.status_code == 200, first.text
        reads: list[str] = []

        def count(conn, cursor, statement, parameters, context, executemany):
            if "FROM run_documents" in statement:
                reads.append(statement)

        event.listen(gw.engine, "before_cursor_execute", count)
        try:
            keys = [alice] * 12 + [bob] * 4 + [revoked] * 4
            with ThreadPoolExecutor(len(keys)) as pool:
                answers = list(pool.map(lambda key: httpx.get(url, headers=bearer(key)), keys))
        finally:
            event.remove(gw.engine, "before_cursor_execute", count)
        statuses = [answer.status_code for answer in answers]
        assert statuses == [200] * 12 + [404] * 4 + [401] * 4, statuses
        assert {answer.text for answer in answers[:12]} == {first.text}
        # Twenty polls within the gathering time: a read or two, not twenty.
        assert 1 <= len(reads) <= 3, len(reads)


def test_a_poll_is_answered_by_a_read_begun_after_it_arrived():
    async def scenario() -> list[list[str | None]]:
        shared = SharedReads(gather_sec=0.05, hot_polls=1)
        reading, release = threading.Event(), threading.Event()
        reads: list[list[str | None]] = []

        def read(presented: list[str | None]) -> dict[str | None, str | Exception]:
            reads.append(sorted(presented, key=str))
            reading.set()
            release.wait(5)
            return {key: f"for {key}" for key in presented}

        first = asyncio.create_task(shared.answer(("run",), "a", read))
        # The first read has begun: a poll arriving now needs a read of its own.
        await asyncio.to_thread(reading.wait, 5)
        second = asyncio.create_task(shared.answer(("run",), "b", read))
        await asyncio.sleep(0.2)
        release.set()
        assert await first == "for a" and await second == "for b"
        return reads

    assert asyncio.run(scenario()) == [["a"], ["b"]]


def test_a_lone_poll_waits_for_nothing():
    async def scenario() -> float:
        shared = SharedReads(gather_sec=5.0, hot_polls=10)
        began = time.monotonic()
        for _ in range(5):
            assert (
                await shared.answer(("run",), None, lambda keys: dict.fromkeys(keys, "doc"))
                == "doc"
            )
        return time.monotonic() - began

    assert asyncio.run(scenario()) < 1.0


def test_a_refusal_is_raised_to_its_poll_alone():
    async def scenario() -> tuple[str, Exception | None]:
        shared = SharedReads(gather_sec=0.1, hot_polls=1)

        def read(presented: list[str | None]) -> dict[str | None, str | Exception]:
            return {key: LookupError("no run") if key == "bob" else "doc" for key in presented}

        answers = await asyncio.gather(
            shared.answer(("run",), "alice", read),
            shared.answer(("run",), "bob", read),
            return_exceptions=True,
        )
        return answers[0], answers[1]

    alice, bob = asyncio.run(scenario())
    assert alice == "doc" and isinstance(bob, LookupError)
