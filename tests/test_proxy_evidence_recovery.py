"""Evidence survives a proxy killed between staging and publishing: published exactly once."""

import os
import signal
import time
from datetime import UTC, datetime

import anthropic
import httpx
import pytest
from sqlalchemy import func, select

from synth_pipelines.config import Settings
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.schema import evidence_calls, evidence_chunks
from synth_pipelines.evidence.publisher import EvidencePublisher, chunk_key, chunk_parquet
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.storage.objectstore import open_object_store
from tests.live_services import MODEL, model_service, set_script, start_served_proxy
from tests.production_services import free_port


def _counts() -> tuple[int, int]:
    with control_engine(Settings()).connect() as conn:
        calls = conn.execute(select(func.count()).select_from(evidence_calls)).scalar_one()
        chunks = conn.execute(select(func.count()).select_from(evidence_chunks)).scalar_one()
    return calls, chunks


@pytest.mark.slow
def test_kill_between_staging_and_publishing_publishes_every_call_exactly_once(state):
    port = free_port()
    with model_service() as model_url:
        set_script(model_url, [{"completion": "noted", "repeat": True}])
        proxy = start_served_proxy(model_url, port, publish_interval=3600)
        from proxy.server import proxy_config
        from tests.live_services import Proxy

        token = Proxy("", proxy_config(Settings())).token(run="r-kill", attempt="a-kill")
        client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key=token)
        answers = [
            client.messages.create(
                model=MODEL, max_tokens=16, messages=[{"role": "user", "content": f"note {n}"}]
            ).id
            for n in range(6)
        ]
        assert len(Spool(state / "spool").staged_call_ids()) == 6
        assert _counts() == (0, 0)
        os.killpg(proxy.pid, signal.SIGKILL)
        proxy.wait()

        restarted = start_served_proxy(model_url, port, publish_interval=0.2)
        try:
            deadline = time.monotonic() + 60
            while (
                time.monotonic() < deadline
                and httpx.get(f"http://127.0.0.1:{port}/health").json()["evidence_pending"]
            ):
                time.sleep(0.2)
            time.sleep(0.5)
        finally:
            os.killpg(restarted.pid, signal.SIGTERM)
            restarted.wait()

    calls, chunks = _counts()
    assert calls == 6
    store = open_object_store(Settings().objects_url)
    assert len(list(store.list("evidence"))) == chunks
    evidence = read_attempt_evidence(control_engine(Settings()), store, ["a-kill"])
    assert evidence.problems == {}
    published = evidence.calls["a-kill"]
    assert sorted(f"msg_{c.call_id}" for c in published) == sorted(answers)
    assert all(c.aligned for c in published)


def _interaction(n: int) -> Interaction:
    return Interaction(
        call_id=f"call-{n}",
        run_id="r",
        batch=None,
        attempt_id="a",
        trial_id=None,
        owner="o",
        role="actor",
        agent_id="main",
        parent_agent_id=None,
        agent_type=None,
        native_session_id=None,
        call_index=n,
        model=MODEL,
        sampler=MODEL,
        temperature=1.0,
        prompt_tokens=[1, 2, 3],
        completion_tokens=[4],
        logprobs=[-0.5],
        sampler_stop_reason="stop",
        stop_reason="end_turn",
        parse_error=False,
        fitted=False,
        request_json="{}",
        effective_request_json=None,
        response_json="{}",
        render_ms=1.0,
        sample_ms=1.0,
        parse_ms=1.0,
        total_ms=3.0,
        created_at=datetime.now(UTC),
    )


def test_publisher_completes_an_interrupted_chunk_without_duplicating_it(state):
    spool = Spool(state / "spool")
    store = open_object_store(Settings().objects_url)
    calls = [_interaction(n) for n in range(3)]
    for call in calls:
        spool.stage(call)
    # The publisher died after uploading the chunk and before committing its reference.
    intent = spool.write_intent("r", None, "a", [c.call_id for c in calls])
    store.put(chunk_key(intent), chunk_parquet(Interaction.to_table(calls)))
    spool.stage(_interaction(3))

    published = EvidencePublisher(spool, store, control_engine(Settings())).publish_pending()
    again = EvidencePublisher(spool, store, control_engine(Settings())).publish_pending()

    assert published[0].chunk_key == chunk_key(intent)
    assert again == []
    assert _counts() == (4, 2)
    assert len(list(store.list("evidence"))) == 2
    assert spool.staged_call_ids() == [] and spool.intents() == []
