"""Checkpoints in the project's create-only object store, addressed by `tinker://` paths.

A checkpoint is one safetensors object: the adapter factors, Adam state for full
training state (`save_state`), and metadata naming the base model and LoRA config, so
any later service process on the same store can load it again.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from tinker.types.checkpoint import ParsedCheckpointTinkerPath

from synth_pipelines.storage.objectstore import ObjectExistsError, ObjectMissingError, ObjectStore
from synth_pipelines.tinker_local.errors import NotFoundError, UserError
from synth_pipelines.tinker_local.lora import LoraSpec

CheckpointKind = Literal["weights", "sampler_weights"]
FORMAT = "synth-tinker-local/1"
KEY_PREFIX = "tinker-checkpoints"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ADAPTER = "adapter/"
_OPTIMIZER = "optimizer/"
_DESCRIPTION = "synth_checkpoint"


@dataclass(frozen=True)
class CheckpointPath:
    run_id: str
    kind: CheckpointKind
    name: str

    @classmethod
    def new(cls, run_id: str, kind: CheckpointKind, name: str) -> CheckpointPath:
        if not _NAME.match(name):
            raise UserError(
                f"checkpoint name {name!r} is not allowed: use letters, digits, '.', '_' "
                "and '-', starting with a letter or digit"
            )
        return cls(run_id, kind, name)

    @classmethod
    def parse(cls, path: str) -> CheckpointPath:
        try:
            parsed = ParsedCheckpointTinkerPath.from_tinker_path(path)
        except ValueError:
            raise UserError(
                f"{path!r} is not a checkpoint path: expected "
                "tinker://<run>/weights/<name> or tinker://<run>/sampler_weights/<name>"
            ) from None
        kind, _, name = parsed.checkpoint_id.partition("/")
        if kind not in ("weights", "sampler_weights"):
            raise UserError(f"{path!r}: the local service stores only weights and sampler_weights")
        return cls(parsed.training_run_id, kind, name)  # type: ignore[arg-type]

    @property
    def uri(self) -> str:
        return f"tinker://{self.run_id}/{self.kind}/{self.name}"

    @property
    def object_key(self) -> str:
        return f"{KEY_PREFIX}/{self.run_id}/{self.kind}/{self.name}.safetensors"


@dataclass(frozen=True)
class Checkpoint:
    base_model: str
    spec: LoraSpec
    adapter: dict[str, torch.Tensor]
    optimizer: dict[str, torch.Tensor] | None


class CheckpointStore:
    def __init__(self, store: ObjectStore):
        self.store = store
        self._base_models: dict[str, str] = {}

    def base_model(self, path: CheckpointPath) -> str:
        """The base model a checkpoint was trained on; remembered, since checkpoints never
        change (the service reads it in a thread first, then again on its event loop)."""
        found = self._base_models.get(path.uri)
        if found is None:
            found = self._base_models[path.uri] = self.load(path).base_model
        return found

    def save(self, path: CheckpointPath, checkpoint: Checkpoint) -> None:
        tensors = {f"{_ADAPTER}{name}": value for name, value in checkpoint.adapter.items()}
        if checkpoint.optimizer is not None:
            tensors.update(
                {f"{_OPTIMIZER}{name}": value for name, value in checkpoint.optimizer.items()}
            )
        # safetensors writes its metadata map in arbitrary order; one canonical JSON value
        # keeps identical checkpoints byte-identical, which the create-only store relies on.
        description = {
            "format": FORMAT,
            "base_model": checkpoint.base_model,
            "lora": asdict(checkpoint.spec),
            "has_optimizer": checkpoint.optimizer is not None,
        }
        blob = save_safetensors(
            {name: value.detach().contiguous().cpu() for name, value in tensors.items()},
            metadata={_DESCRIPTION: json.dumps(description, sort_keys=True)},
        )
        try:
            self.store.put(path.object_key, blob)
        except ObjectExistsError:
            raise UserError(
                f"checkpoint {path.uri} already exists with other contents; checkpoints are "
                "create-only, so save under a new name"
            ) from None

    def load(self, path: CheckpointPath) -> Checkpoint:
        try:
            blob = self.store.get(path.object_key)
        except ObjectMissingError:
            raise NotFoundError(
                f"no checkpoint at {path.uri}: save it first with save_state or "
                "save_weights_for_sampler"
            ) from None
        description = _description(blob)
        if description.get("format") != FORMAT:
            raise UserError(f"{path.uri} is not a checkpoint this service wrote")
        tensors = load_safetensors(blob)
        adapter = {
            name.removeprefix(_ADAPTER): value
            for name, value in tensors.items()
            if name.startswith(_ADAPTER)
        }
        optimizer = None
        if description["has_optimizer"]:
            optimizer = {
                name.removeprefix(_OPTIMIZER): value
                for name, value in tensors.items()
                if name.startswith(_OPTIMIZER)
            }
        return Checkpoint(
            description["base_model"], LoraSpec(**description["lora"]), adapter, optimizer
        )


def _description(blob: bytes) -> dict[str, Any]:
    """The metadata from the safetensors header: 8 bytes of length, then JSON."""
    header_length = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8 : 8 + header_length])
    description: dict[str, Any] = json.loads(header.get("__metadata__", {}).get(_DESCRIPTION, "{}"))
    return description
