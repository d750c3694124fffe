"""Through the gateway an owner reads their runs and follows their events; another
owner's run is answered exactly as one that does not exist (404), on every route. A run's
Dagster link is on the address the gateway was reached at. Followers of a run share one
reader of its events, and each gets every event once, in order."""

from __future__ import annotations

import json
import threading
import time

import httpx
import sqlalchemy

from gateway import event_feeds
from gateway.config import GatewayConfig
from synth_pipelines.contracts.documents import dagster_runs_url
from synth_pipelines.control.events import read_events, record_event
from synth_pipelines.control.runs import transition
from tests.gateway_support import bearer, gateway


def test_an_owner_sees_their_runs_and_another_owners_are_404_like_none(state):
    with gateway() as gw:
        alice, bob = gw.key("alice", role="viewer"), gw.key("bob", role="viewer")
        mine, theirs = gw.run("alice"), gw.run("bob")
        listed = httpx.get(f"{gw.url}/v1/runs", headers=bearer(alice)).json()
        assert [run["run_id"] for run in listed] == [mine.run_id]
        shown = httpx.get(f"{gw.url}/v1/runs/{mine.run_id[:8]}", headers=bearer(alice))
        assert shown.status_code == 200 and shown.json()["owner"] == "alice", shown.text
        for path in ("", "/events", "/events?follow=true"):
            other = httpx.get(f"{gw.url}/v1/runs/{theirs.run_id}{path}", headers=bearer(alice))
            none = httpx.get(f"{gw.url}/v1/runs/r-000000000000{path}", headers=bearer(alice))
            assert other.status_code == none.status_code == 404, (path, other.text)
            assert other.json()["error"]["message"].replace(theirs.run_id, "ID") == none.json()[
                "error"
            ]["message"].replace("r-000000000000", "ID")
        # A prefix of another owner's run matches nothing of alice's.
        prefix = httpx.get(f"{gw.url}/v1/runs/{theirs.run_id[:6]}", headers=bearer(alice))
        assert prefix.status_code == 404 or theirs.run_id[:6] == mine.run_id[:6]
        assert httpx.get(f"{gw.url}/v1/runs", headers=bearer(bob)).json()[0]["run_id"] == (
            theirs.run_id
        )
        bad = httpx.get(f"{gw.url}/v1/runs", headers=bearer(alice), params={"status": "done"})
        assert bad.status_code == 400 and "status 'done' is not one of" in bad.text


def test_a_runs_dagster_link_is_on_the_address_the_gateway_was_reached_at(state):
    with gateway() as gw:
        alice = gw.key("alice", role="viewer")
        run = gw.run("alice")
        # Twice each, alternating: the results document kept for one address is never the
        # answer at the other.
        for base in (gw.url, "http://gateway.example:8443") * 2:
            headers = {**bearer(alice), "host": base.removeprefix("http://")}
            link = dagster_runs_url(f"{base}/dagster", run.run_id)
            for path in ("", f"/{run.run_id}", f"/{run.run_id}/results"):
                answer = httpx.get(f"{gw.url}/v1/runs{path}", headers=headers)
                assert answer.status_code == 200, answer.text
                document = answer.json()
                shown = document[0] if isinstance(document, list) else document
                assert shown["dagster_url"] == link, (base, path)


def test_a_followed_run_streams_each_event_within_a_second_and_ends_with_it(state):
    with gateway() as gw:
        alice = gw.key("alice", role="viewer")
        run = gw.run("alice")
        before = httpx.get(f"{gw.url}/v1/runs/{run.run_id}/events", headers=bearer(alice))
        cursor = before.json()[-1]["seq"]
        received: list[tuple[float, dict]] = []
        ended: list[dict] = []

        def follow() -> None:
            with httpx.stream(
                "GET",
                f"{gw.url}/v1/runs/{run.run_id}/events",
                params={"follow": "true", "after": cursor},
                headers=bearer(alice),
                timeout=30,
            ) as stream:
                kind = None
                for line in stream.iter_lines():
                    if line.startswith("event: "):
                        kind = line.removeprefix("event: ")
                    elif line.startswith("data: ") and kind == "run_event":
                        received.append((time.monotonic(), json.loads(line[6:])))
                    elif line.startswith("data: ") and kind == "end":
                        ended.append(json.loads(line[6:]))

        follower = threading.Thread(target=follow)
        follower.start()
        time.sleep(0.5)
        delays = []
        for index in range(3):
            committed = time.monotonic()
            record_event(gw.engine, run.run_id, "probe", {"index": index})
            while len(received) <= index and time.monotonic() - committed < 5:
                time.sleep(0.01)
            delays.append(received[index][0] - committed)
        transition(gw.engine, run.run_id, "succeeded", "run_succeeded")
        follower.join(timeout=10)
        assert not follower.is_alive()
        assert max(delays) < 1.0, delays
        kinds = [event["kind"] for _, event in received]
        assert kinds[:3] == ["probe"] * 3 and [e["data"]["index"] for _, e in received[:3]] == [
            0,
            1,
            2,
        ]
        assert ended == [{"status": "succeeded"}]
        # Resuming from the last id seen gives exactly what came after it.
        last = received[0][1]["seq"]
        resumed = httpx.get(
            f"{gw.url}/v1/runs/{run.run_id}/events",
            params={"after": last},
            headers=bearer(alice),
        ).json()
        assert [event["seq"] for event in resumed] == [event["seq"] for _, event in received[1:]]


def _follow(url: str, key: str, run_id: str, received: list[dict], ended: list[dict]) -> None:
    with httpx.stream(
        "GET",
        f"{url}/v1/runs/{run_id}/events",
        params={"follow": "true"},
        headers=bearer(key),
        timeout=30,
    ) as stream:
        kind = None
        for line in stream.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                (received if kind == "run_event" else ended).append(json.loads(line[6:]))


def test_followers_of_a_run_share_one_reader_and_each_gets_every_event(state, monkeypatch):
    # A feed holding only a few events: the late follower catches up from the database.
    monkeypatch.setattr(event_feeds, "KEPT_FRAMES", 4)
    with gateway() as gw:
        alice = gw.key("alice", role="viewer")
        run = gw.run("alice")
        before = len(read_events(gw.engine, run_id=run.run_id))
        followers = [([], []) for _ in range(11)]
        threads = [
            threading.Thread(target=_follow, args=(gw.url, alice, run.run_id, *streams))
            for streams in followers
        ]
        for thread in threads[:10]:
            thread.start()
        deadline = time.monotonic() + 10
        while any(len(received) < before for received, _ in followers[:10]):
            assert time.monotonic() < deadline, "the followers did not catch up"
            time.sleep(0.05)

        # Ten idle followers: what the database is asked meanwhile is one reader's polls.
        statements: list[str] = []

        def counted(_conn, _cursor, statement, *_args) -> None:
            statements.append(statement)

        sqlalchemy.event.listen(gw.engine, "before_cursor_execute", counted)
        time.sleep(2.0)
        sqlalchemy.event.remove(gw.engine, "before_cursor_execute", counted)
        polls = sum("run_events" in statement for statement in statements)
        assert polls <= 2.0 / GatewayConfig.event_poll_sec + 5, polls

        for index in range(6):
            record_event(gw.engine, run.run_id, "probe", {"index": index})
        time.sleep(0.5)
        threads[10].start()
        for index in range(6, 12):
            record_event(gw.engine, run.run_id, "probe", {"index": index})
        transition(gw.engine, run.run_id, "succeeded", "run_succeeded")
        for thread in threads:
            thread.join(timeout=20)
            assert not thread.is_alive()
    every = [event.seq for event in read_events(gw.engine, run_id=run.run_id)]
    for received, ended in followers:
        assert [event["seq"] for event in received] == every
        assert ended == [{"status": "succeeded"}]
