"""Low-rank adapters over the frozen backbone.

Every targeted linear layer of the backbone is wrapped once in a `LoraSlot`. An
adapter is only a set of factor tensors; attaching it points each slot at its
factors, so many training runs and sampler snapshots share one copy of the base
weights and switching between them costs no copying.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch
from torch import nn

from synth_pipelines.tinker_local.errors import UserError

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")
UNEMBEDDING = "lm_head"
LORA_ALPHA = 32.0


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    train_attn: bool = True
    train_mlp: bool = True
    train_unembed: bool = True
    alpha: float = LORA_ALPHA

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def wants(self, module_path: str) -> bool:
        leaf = module_path.rsplit(".", 1)[-1]
        return (
            (self.train_attn and leaf in ATTENTION_PROJECTIONS)
            or (self.train_mlp and leaf in MLP_PROJECTIONS)
            or (self.train_unembed and leaf == UNEMBEDDING)
        )


class LoraSlot(nn.Module):
    """A frozen linear layer plus the low-rank update of the attached adapter, if any."""

    def __init__(self, base: nn.Linear):
        super().__init__()
        self.base = base
        self.factors: tuple[torch.Tensor, torch.Tensor] | None = None
        self.scale = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.base(x)
        if self.factors is None:
            return out
        down, up = self.factors
        return out + nn.functional.linear(nn.functional.linear(x, down), up) * self.scale


@dataclass
class Adapter:
    """The factors of one adapter: per module path, A (rank x in) and B (out x rank)."""

    spec: LoraSpec
    factors: dict[str, tuple[torch.Tensor, torch.Tensor]]

    def parameters(self) -> list[torch.Tensor]:
        return [tensor for pair in self.factors.values() for tensor in pair]

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        return [
            (f"{path}.{part}", tensor)
            for path, pair in self.factors.items()
            for part, tensor in zip(("lora_A", "lora_B"), pair, strict=True)
        ]

    def frozen_copy(self) -> Adapter:
        """A snapshot that later training steps cannot change."""
        return Adapter(
            self.spec,
            {
                path: (a.detach().clone(), b.detach().clone())
                for path, (a, b) in self.factors.items()
            },
        )

    def trainable(self) -> Adapter:
        for tensor in self.parameters():
            tensor.requires_grad_(True)
        return self


class LoraSlots:
    """The wrapped layers of one backbone, by their original module path."""

    def __init__(self, slots: dict[str, LoraSlot]):
        self.slots = slots

    @classmethod
    def install(cls, network: nn.Module) -> LoraSlots:
        targets = ATTENTION_PROJECTIONS + MLP_PROJECTIONS + (UNEMBEDDING,)
        found = [
            (path, module)
            for path, module in network.named_modules()
            if isinstance(module, nn.Linear) and path.rsplit(".", 1)[-1] in targets
        ]
        slots: dict[str, LoraSlot] = {}
        for path, module in found:
            parent_path, _, leaf = path.rpartition(".")
            parent = network.get_submodule(parent_path) if parent_path else network
            slot = LoraSlot(module)
            setattr(parent, leaf, slot)
            slots[path] = slot
        return cls(slots)

    def targets(self, spec: LoraSpec) -> list[str]:
        chosen = [path for path in self.slots if spec.wants(path)]
        if not chosen:
            raise UserError(
                "the base model has no layers this LoRA config can adapt: expected linear "
                f"layers named {', '.join(ATTENTION_PROJECTIONS + MLP_PROJECTIONS)} or "
                f"{UNEMBEDDING}; enable train_attn, train_mlp or train_unembed"
            )
        return chosen

    def new_adapter(self, spec: LoraSpec, seed: int) -> Adapter:
        """A kaiming-uniform (as `nn.Linear`), B zero: the model starts equal to the base."""
        factors = {}
        for path in self.targets(spec):
            base = self.slots[path].base
            generator = torch.Generator().manual_seed(_path_seed(seed, path))
            bound = 1.0 / math.sqrt(base.in_features)
            down = (torch.rand(spec.rank, base.in_features, generator=generator) * 2 - 1) * bound
            up = torch.zeros(base.out_features, spec.rank)
            factors[path] = (
                down.to(base.weight.device, base.weight.dtype),
                up.to(base.weight.device, base.weight.dtype),
            )
        return Adapter(spec, factors)

    def adapter_from_tensors(self, spec: LoraSpec, tensors: dict[str, torch.Tensor]) -> Adapter:
        expected = self.targets(spec)
        missing = [path for path in expected if f"{path}.lora_A" not in tensors]
        if missing:
            raise UserError(
                f"the checkpoint has no factors for {missing[0]}: it was saved for a "
                "different base model or LoRA config"
            )
        device = next(iter(self.slots.values())).base.weight.device
        return Adapter(
            spec,
            {
                path: (tensors[f"{path}.lora_A"].to(device), tensors[f"{path}.lora_B"].to(device))
                for path in expected
            },
        )

    def attach(self, adapter: Adapter | None) -> None:
        factors = adapter.factors if adapter is not None else {}
        scale = adapter.spec.scale if adapter is not None else 0.0
        for path, slot in self.slots.items():
            slot.factors = factors.get(path)
            slot.scale = scale


def _path_seed(seed: int, path: str) -> int:
    digest = hashlib.blake2b(f"{seed}:{path}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)
