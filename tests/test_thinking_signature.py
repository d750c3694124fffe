"""Thinking signatures carry the thinking, so `display: omitted` loses nothing on the way back."""

from __future__ import annotations

from synth_pipelines.contracts.messages import TextBlock, ThinkingBlock
from synth_pipelines.rendering.thinking_signature import omit_thinking, sign_thinking, thinking_text


def test_omitted_block_recovers_its_thinking_from_the_signature() -> None:
    text = "Weigh both options — then answer. ünïcode too."
    (omitted,) = omit_thinking([ThinkingBlock(thinking=text, signature=sign_thinking(text))])

    assert isinstance(omitted, ThinkingBlock) and omitted.thinking == ""
    assert thinking_text(omitted.thinking, omitted.signature) == text


def test_visible_thinking_text_wins_over_the_signature() -> None:
    assert thinking_text("edited by client", sign_thinking("original")) == "edited by client"


def test_foreign_or_damaged_signatures_give_no_text() -> None:
    assert thinking_text("", "EqQBCkYIARgCKkDm3...anthropic") == ""
    assert thinking_text("", sign_thinking("x")[:-4] + "!!!!") == ""


def test_omit_thinking_leaves_other_blocks_alone() -> None:
    content = [TextBlock(text="hi")]

    assert omit_thinking(content) == content
