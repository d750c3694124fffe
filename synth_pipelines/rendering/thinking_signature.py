"""Thinking-block signatures that carry the thinking text itself.

Anthropic's `thinking.display: "omitted"` (Claude Code's default) returns thinking blocks with
empty text and an opaque signature, and the client sends them back that way. The native chat
formats re-render a tool loop's earlier thinking, so the proxy's signature is the thinking text,
compressed: an omitted block still renders exactly what the model wrote. A client that edits a
signature only changes its own prompt, so the signature needs no secret.
"""

from __future__ import annotations

import base64
import binascii
import zlib

from synth_pipelines.contracts.messages import ContentBlock, ThinkingBlock

SIGNATURE_PREFIX = "synth-thinking-v1."


def sign_thinking(thinking: str) -> str:
    packed = base64.urlsafe_b64encode(zlib.compress(thinking.encode("utf-8")))
    return SIGNATURE_PREFIX + packed.decode("ascii")


def thinking_text(thinking: str, signature: str) -> str:
    """The block's text, or, for an omitted block, the text its signature carries.

    A signature from elsewhere (e.g. Anthropic's own) cannot be read, so such an omitted block
    has no text to render.
    """
    if thinking or not signature.startswith(SIGNATURE_PREFIX):
        return thinking
    try:
        packed = base64.urlsafe_b64decode(signature[len(SIGNATURE_PREFIX) :])
        return zlib.decompress(packed).decode("utf-8")
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError):
        return ""


def omit_thinking(content: list[ContentBlock]) -> list[ContentBlock]:
    """Content as `display: "omitted"` returns it: thinking text removed, signatures kept."""
    return [
        ThinkingBlock(thinking="", signature=block.signature)
        if isinstance(block, ThinkingBlock)
        else block
        for block in content
    ]
