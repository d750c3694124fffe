"""One reader of a followed run's events for all of its followers.

A follower (`GET /v1/runs/{run}/events?follow=true`) that polled the control database on
its own cost the gateway a query every poll interval; fifty of them, during a running
evaluation, took CPU the run needed. Here one task per followed run polls, keeps the run's
recent events as server-sent-event frames (each serialized once) and wakes every follower
when more arrive. A follower whose cursor is older than what the feed holds reads the
database itself until it has caught up, so any cursor is served exactly as before.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from sqlalchemy import Engine

from synth_pipelines.contracts.run_event import RunEvent
from synth_pipelines.control.events import last_seq, read_events
from synth_pipelines.control.runs import get_run

log = logging.getLogger(__name__)

EVENT_PAGE = 1000
"""Events read at once, by a feed or a follower catching up (and a page of `GET events`)."""
KEPT_FRAMES = 4096
"""Frames a feed holds: a follower further behind reads the database, as any follower
starting from an old cursor does."""


def event_frame(event: RunEvent) -> str:
    return f"id: {event.seq}\nevent: run_event\ndata: {event.model_dump_json()}\n\n"


@dataclass
class Feed:
    """What a followed run's reader has seen: every event after `start`, in order."""

    start: int
    """Events with a larger seq are all in `seqs`/`frames` (until the oldest are dropped,
    which moves `start` up)."""
    seqs: list[int] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    ended: str | None = None
    """The run's final status, once it finished and no event after `seqs` remains."""
    failed: bool = False
    """The reader stopped on an error: followers end their streams (and reconnect)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    followers: int = 0

    def after(self, cursor: int) -> tuple[list[int], list[str]]:
        """The kept events after `cursor` (which is not older than `start`)."""
        index = bisect.bisect_right(self.seqs, cursor)
        return self.seqs[index:], self.frames[index:]

    def announce(self) -> None:
        # Waiters hold the event they saw: set it for them, and give later ones a new one.
        self.changed.set()
        self.changed = asyncio.Event()

    def add(self, events: list[RunEvent]) -> None:
        self.seqs.extend(event.seq for event in events)
        self.frames.extend(event_frame(event) for event in events)
        if len(self.seqs) > KEPT_FRAMES:
            dropped = len(self.seqs) - KEPT_FRAMES
            self.start = self.seqs[dropped - 1]
            del self.seqs[:dropped], self.frames[:dropped]


class EventFeeds:
    """The gateway's feeds, one per run someone follows, each read every `poll_sec`."""

    def __init__(self, engine: Engine, poll_sec: float) -> None:
        self.engine = engine
        self.poll_sec = poll_sec
        self._feeds: dict[str, Feed] = {}
        self._readers: dict[str, asyncio.Task[None]] = {}

    @asynccontextmanager
    async def follow(self, run_id: str) -> AsyncIterator[Feed]:
        feed = self._feeds.get(run_id)
        if feed is None:
            latest = await asyncio.to_thread(last_seq, self.engine, run_id)
            # Another follower may have started the feed while this one read.
            feed = self._feeds.get(run_id)
            if feed is None:
                feed = self._feeds[run_id] = Feed(start=latest)
                self._readers[run_id] = asyncio.create_task(self._read(run_id, feed))
        feed.followers += 1
        try:
            yield feed
        finally:
            feed.followers -= 1
            if feed.followers == 0 and self._feeds.get(run_id) is feed:
                del self._feeds[run_id]
                self._readers.pop(run_id).cancel()

    async def _read(self, run_id: str, feed: Feed) -> None:
        try:
            while True:
                head = feed.seqs[-1] if feed.seqs else feed.start
                found = await asyncio.to_thread(
                    read_events, self.engine, run_id=run_id, after=head, limit=EVENT_PAGE
                )
                if found:
                    feed.add(found)
                    feed.announce()
                    if len(found) == EVENT_PAGE:
                        continue
                else:
                    run = await asyncio.to_thread(get_run, self.engine, run_id)
                    # Its last events were committed before it finished: one more read
                    # after seeing it finished finds them all.
                    if run.finished and not await asyncio.to_thread(
                        read_events, self.engine, run_id=run_id, after=head, limit=1
                    ):
                        feed.ended = run.status
                        feed.announce()
                        return
                await asyncio.sleep(self.poll_sec)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("reading run %s's events for its followers failed", run_id)
            feed.failed = True
            feed.announce()
            # A follower arriving later starts a new feed rather than joining this one.
            if self._feeds.get(run_id) is feed:
                del self._feeds[run_id], self._readers[run_id]
