"""Token ids for a model's output written as text, to stand in for what a sampler returns."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tml_renderers.tokenizers import Tokenizer


def sampled_tokens(tokenizer: Tokenizer, text: str, specials: Sequence[str]) -> list[int]:
    """`text` as the model would emit it: each of `specials` one special token, the rest BPE."""
    pattern = "(" + "|".join(re.escape(special) for special in specials) + ")"
    tokens: list[int] = []
    for part in re.split(pattern, text):
        if part in specials:
            tokens.append(tokenizer.encode_special(part))
        elif part:
            tokens.extend(tokenizer.encode_ordinary(part))
    return tokens
