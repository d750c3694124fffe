"""The evidence spool: a call staged in two parts is the call staged whole, and only whole."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.evidence import staged_call
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.evidence.staged_call import TornCallError
from tests.evidence_calls import interaction


def test_a_call_staged_in_two_parts_reads_back_exactly_as_the_call(tmp_path: Path):
    spool = Spool(tmp_path)
    call = interaction("call-1", prompt_tokens=list(range(150_000, 170_000)))
    staged = spool.stage_prompt(
        call.call_id, call.prompt_tokens, call.request_json, call.effective_request_json
    )
    spool.stage_completion(staged, call)

    assert spool.load_table(["call-1"]).equals(Interaction.to_table([call]))
    assert spool.staged_call_ids() == ["call-1"] and spool.pending() == 1


def test_a_call_whose_completion_never_came_is_not_staged_and_is_removed_at_start(
    tmp_path: Path,
):
    spool = Spool(tmp_path)
    call = interaction("call-1")
    staged = spool.stage_prompt(call.call_id, call.prompt_tokens, call.request_json, None)
    os.close(staged.descriptor)  # the proxy stopped while the call was sampling

    assert spool.staged_call_ids() == [] and spool.pending() == 0
    assert spool.staged() == []
    assert spool.discard_incomplete() == 1
    assert list(spool.staged_dir.iterdir()) == []


def test_a_torn_call_is_refused_when_read_and_removed_at_start(tmp_path: Path):
    spool = Spool(tmp_path)
    spool.stage(interaction("call-1"))
    spool.stage(interaction("call-2"))
    torn = spool.staged_dir / "call-1.call"
    data = bytearray(torn.read_bytes())
    data[len(data) // 3] ^= 0xFF
    torn.write_bytes(bytes(data))

    with pytest.raises(TornCallError, match=r"call-1\.call does not match its trailer"):
        spool.load_table(["call-1"])
    assert spool.discard_incomplete() == 1
    assert spool.staged_call_ids() == ["call-2"]


def test_a_discarded_call_leaves_nothing(tmp_path: Path):
    spool = Spool(tmp_path)
    call = interaction("call-1")
    spool.discard(spool.stage_prompt(call.call_id, call.prompt_tokens, call.request_json, None))

    assert list(spool.staged_dir.iterdir()) == []


def test_a_completion_is_refused_for_another_calls_prompt(tmp_path: Path):
    spool = Spool(tmp_path)
    first = interaction("call-1")
    staged = spool.stage_prompt(first.call_id, first.prompt_tokens, first.request_json, None)

    with pytest.raises(ValueError, match="completion of call call-2 given for call call-1"):
        spool.stage_completion(staged, interaction("call-2"))
    assert spool.staged_call_ids() == []


def test_a_call_whose_completion_lands_while_the_spool_is_listed_is_pending_on_the_next_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The publisher lists the spool while the proxy appends completions: a file that grows
    between the size it is measured at and the read of its trailer is not yet staged."""
    spool = Spool(tmp_path)
    call = interaction("call-1")
    staged = spool.stage_prompt(call.call_id, call.prompt_tokens, call.request_json, None)
    real_open = open

    class CompletionLandsAfterSizing:
        def __init__(self, path, mode):
            self.handle = real_open(path, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def seek(self, offset, whence=0):
            position = self.handle.seek(offset, whence)
            if whence == 2:
                spool.stage_completion(staged, call)  # the proxy's real append, just then
            return position

        def read(self, *size):
            return self.handle.read(*size)

    monkeypatch.setattr(staged_call, "open", CompletionLandsAfterSizing, raising=False)
    assert spool.pending() == 0
    monkeypatch.undo()
    assert spool.pending() == 1 and spool.staged_call_ids() == ["call-1"]
