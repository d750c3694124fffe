"""A tml-renderers tokenizer behind the few Hugging Face tokenizer calls the service makes.

The DeepSeek, Kimi and GLM families have no Hugging Face tokenizer files on this platform;
tml-renderers ships their tokenizers natively, the same ones the proxy's family adapters
render with, so a seeded model of that family and the proxy agree on every id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tml_renderers import renderers
from tml_renderers.tokenizers import Tokenizer

from synth_pipelines.rendering.model_names import DEEPSEEK_TINY, GLM_TINY, KIMI_TINY

# The renderers the family adapters use (synth_pipelines/rendering/adapters/): their
# tokenizers and stops.
_FAMILY_RENDERERS = {
    DEEPSEEK_TINY: renderers.DeepSeekV31,
    KIMI_TINY: renderers.KimiK2,
    GLM_TINY: renderers.Glm53,
}


class NativeTokenizer:
    """`encode`/`decode`/`len` as the service calls them on a Hugging Face tokenizer."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.native = tokenizer
        # `special_tokens()` gives names (`endoftext`); the model's text spells them as they
        # decode (`<|endoftext|>`).
        ids = [tokenizer.encode_special(name) for name in tokenizer.special_tokens()]
        self._special_ids = {tokenizer.decode([token]): token for token in ids}
        specials = list(self._special_ids)
        # Longest first, so a special token that starts another is not matched in its place.
        ordered = sorted(specials, key=len, reverse=True)
        self._special_pattern = re.compile("(" + "|".join(map(re.escape, ordered)) + ")")
        self._size = _vocabulary_size(tokenizer, max(self._special_ids.values()))

    def __len__(self) -> int:
        return self._size

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Special-token spellings become their ids, the rest ordinary BPE, as the family's
        model emits them; there is no beginning-of-sequence token to add."""
        del add_special_tokens
        tokens: list[int] = []
        for part in self._special_pattern.split(text):
            if part in self._special_ids:
                tokens.append(self._special_ids[part])
            elif part:
                tokens.extend(self.native.encode_ordinary(part))
        return tokens

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        ids = list(token_ids)
        if skip_special_tokens:
            ids = [token for token in ids if not self.native.is_special_token(token)]
        return self.native.decode(ids)


def family_tokenizer(model_name: str) -> tuple[NativeTokenizer, tuple[int, ...]]:
    """A family model's tokenizer and the token ids that end its turn."""
    renderer = _FAMILY_RENDERERS[model_name]()
    stop = renderer.stop()
    if not isinstance(stop, list) or not all(isinstance(token, int) for token in stop):
        raise RuntimeError(f"{model_name}: its renderer stops on {stop!r}, not on token ids")
    return NativeTokenizer(renderer.tokenizer), tuple(stop)


def _vocabulary_size(tokenizer: Tokenizer, highest_special: int) -> int:
    """One past the highest id the tokenizer decodes: its special tokens come last in every
    family shipped, but one beyond them is checked so a vocabulary that grew is noticed."""
    try:
        tokenizer.decode_bytes([highest_special + 1])
    except ValueError:
        return highest_special + 1
    raise RuntimeError(
        f"{type(tokenizer).__name__} decodes ids past its highest special token "
        f"({highest_special}); its vocabulary size is not known here"
    )
