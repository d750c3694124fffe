"""Publishing staged evidence: an attempt's calls wait until it settles, then share a chunk."""

from __future__ import annotations

from pathlib import Path

from synth_pipelines.config import Settings
from synth_pipelines.control.database import control_engine
from synth_pipelines.evidence.publisher import EvidencePublisher
from synth_pipelines.evidence.reader import read_attempt_evidence
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.storage.objectstore import open_object_store
from tests.evidence_calls import conversation, interaction


def _publisher(state: Path, **policy: float) -> EvidencePublisher:
    return EvidencePublisher(
        Spool(state / "spool"),
        open_object_store(Settings().objects_url),
        control_engine(Settings()),
        **policy,
    )


def test_an_attempt_is_published_once_it_has_staged_nothing_for_the_settle_time(state: Path):
    publisher = _publisher(state, settle_sec=30, max_wait_sec=600)
    for n in range(3):
        publisher.spool.stage(interaction(f"busy-{n}", attempt="a-busy", call_index=n))
        publisher.spool.stage(
            interaction(f"quiet-{n}", attempt="a-quiet", call_index=n, age_sec=60 - n)
        )

    (chunk,) = publisher.publish_pending()

    assert (chunk.attempt_id, chunk.calls) == ("a-quiet", 3)
    assert publisher.spool.staged_call_ids() == ["busy-0", "busy-1", "busy-2"]


def test_a_busy_attempt_is_published_once_its_oldest_call_waited_max_wait(state: Path):
    publisher = _publisher(state, settle_sec=30, max_wait_sec=120)
    publisher.spool.stage(interaction("old", call_index=0, age_sec=150))
    publisher.spool.stage(interaction("new", call_index=1))

    (chunk,) = publisher.publish_pending()

    assert chunk.calls == 2 and publisher.spool.pending() == 0


def test_publishing_everything_ignores_the_settle_time_and_keeps_call_order(state: Path):
    publisher = _publisher(state, settle_sec=30)
    calls = [interaction(f"call-{n}", call_index=n, age_sec=10 - n) for n in range(4)]
    for call in reversed(calls):
        publisher.spool.stage(call)

    assert publisher.publish_pending() == []
    (chunk,) = publisher.publish_pending(everything=True)

    published = read_attempt_evidence(control_engine(Settings()), publisher.store, ["a-1"])
    assert chunk.calls == 4 and published.problems == {}
    assert published.calls["a-1"] == calls


def test_a_conversation_in_one_chunk_takes_under_half_the_space_of_a_chunk_per_call(
    state: Path,
):
    publisher = _publisher(state)
    for call in conversation("a-together", turns=4):
        publisher.spool.stage(call)
    together = publisher.publish_pending()
    apart = []
    for call in conversation("a-apart", turns=4):
        publisher.spool.stage(call)
        apart.extend(publisher.publish_pending())

    assert [chunk.calls for chunk in together] == [5]
    assert [chunk.calls for chunk in apart] == [1] * 5
    assert sum(chunk.size for chunk in together) * 2 < sum(chunk.size for chunk in apart)
