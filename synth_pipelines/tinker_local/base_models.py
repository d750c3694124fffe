"""The base models one service serves: each loaded on first use, a bounded number at once.

Every loaded model has its own network with its adapter slots and its own engine thread,
so a run training one model and an evaluation sampling another share the service without
waiting on each other's weights. Loading takes seconds, so callers on the event loop load
through a thread (`api.py`). When the bound is reached, the least recently used model
that nothing refers to (no training client, no sampler) is unloaded; if every loaded model
is in use, loading another is refused.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from synth_pipelines.rendering.model_names import DEFAULT_MAX_LOADED, SEEDED_MODEL_NAMES
from synth_pipelines.tinker_local.backbone import Backbone, load_backbone
from synth_pipelines.tinker_local.engine import Engine
from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.lora import LoraSlots
from synth_pipelines.tinker_local.sampling import Sampler


@dataclass
class LoadedModel:
    backbone: Backbone
    slots: LoraSlots
    engine: Engine

    @classmethod
    def load(cls, name: str, device: torch.device | None) -> LoadedModel:
        backbone = load_backbone(name, device)
        slots = LoraSlots.install(backbone.network)
        engine = Engine(slots, Sampler(backbone))
        engine.start()
        return cls(backbone, slots, engine)


class BaseModels:
    def __init__(
        self,
        names: Sequence[str] = (),
        *,
        device: torch.device | None = None,
        max_loaded: int = DEFAULT_MAX_LOADED,
    ):
        """Serve `names` and every seeded model; `names` come first (`synth up` loads the
        first at start)."""
        if max_loaded < 1:
            raise UserError(f"a model service must be able to load one model, not {max_loaded}")
        self.names = list(dict.fromkeys([*names, *SEEDED_MODEL_NAMES]))
        self.device = device
        self.max_loaded = max_loaded
        self.in_use: Callable[[str], bool] = lambda name: False
        self._loaded: OrderedDict[str, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading = threading.Lock()

    def served(self) -> list[str]:
        return list(self.names)

    def loaded(self) -> list[LoadedModel]:
        with self._lock:
            return list(self._loaded.values())

    def get(self, name: str | None) -> LoadedModel:
        """The model, loaded now if it is not yet; a name the service does not serve is a
        user error saying which it does. Only a load waits for another load."""
        if name not in self.names:
            raise UserError(
                f"this model service serves {', '.join(map(repr, self.names))}, not {name!r}; "
                f"start one for it with `synth model serve --base-model {name}`"
            )
        with self._lock:
            model = self._loaded.get(name)
            if model is not None:
                self._loaded.move_to_end(name)
                return model
        with self._loading:
            with self._lock:
                model = self._loaded.get(name)
                if model is not None:
                    return model
                self._make_room()
            model = LoadedModel.load(name, self.device)
            with self._lock:
                self._loaded[name] = model
            return model

    def _make_room(self) -> None:
        while len(self._loaded) >= self.max_loaded:
            idle = next((name for name in self._loaded if not self.in_use(name)), None)
            if idle is None:
                raise UserError(
                    f"this model service holds {len(self._loaded)} base models in use "
                    f"({', '.join(self._loaded)}), its limit; finish their sessions or "
                    "start it with a higher --max-loaded"
                )
            self._loaded.pop(idle).engine.stop()

    def stop(self) -> None:
        with self._lock:
            for model in self._loaded.values():
                model.engine.stop()
            self._loaded.clear()
