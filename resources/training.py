"""The model service's training side as a Dagster resource: the local Tinker-compatible
service by default, the Tinker cloud by configuration (`TINKER_BASE_URL`, `TINKER_API_KEY`).

A training batch runs its steps in one process, so the update a ready group started
while others were still sampling is the same object the optimizer step completes. The
tinker SDK (and torch under it) is imported only when a batch trains, so the code location
loads quickly."""

import os
from typing import Any

import dagster as dg
from pydantic import PrivateAttr

from synth_pipelines.config import settings
from synth_pipelines.contracts.learning import PolicyBinding
from synth_pipelines.contracts.plan import TrainPlan


class TrainingService(dg.ConfigurableResource):
    base_url: str | None = None
    api_key: str | None = None
    _service: Any = PrivateAttr(default=None)
    _updates: dict[str, Any] = PrivateAttr(default_factory=dict)

    def service(self):
        import tinker

        if self._service is None:
            self._service = tinker.ServiceClient(
                base_url=self.base_url
                or os.environ.get("TINKER_BASE_URL")
                or settings().model_service_url,
                api_key=self.api_key or os.environ.get("TINKER_API_KEY") or "tml-synth-local",
            )
        return self._service

    def update_for(self, binding: PolicyBinding, plan: TrainPlan):
        """The batch's `BatchUpdate`, shared by every step of the batch's run."""
        from synth_pipelines.learning.trainer import BatchUpdate

        update = self._updates.get(binding.batch)
        if update is None or update.binding != binding:
            update = self._updates[binding.batch] = BatchUpdate(self.service(), binding, plan)
        return update
