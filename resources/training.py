"""The model service's training side as a Dagster resource: the local Tinker-compatible
service by default, the Tinker cloud by configuration (`TINKER_BASE_URL`, `TINKER_API_KEY`).

It holds the connection, nothing of a batch: a batch's training client lives in its own
step (`learning/training_step.py`). The tinker SDK (and torch under it) is imported only
when something trains, so the code location loads quickly."""

from typing import TYPE_CHECKING

import dagster as dg
from pydantic import PrivateAttr

if TYPE_CHECKING:
    import tinker


class TrainingService(dg.ConfigurableResource["TrainingService"]):
    base_url: str
    api_key: str
    _service: "tinker.ServiceClient | None" = PrivateAttr(default=None)

    def service(self) -> "tinker.ServiceClient":
        import tinker

        if self._service is None:
            self._service = tinker.ServiceClient(
                base_url=self.base_url,
                api_key=self.api_key,
            )
        return self._service

    def new_service(self) -> "tinker.ServiceClient":
        """A ServiceClient with a session of its own, in place of one the backend lost
        (it restarted): what this resource hands out from now on."""
        self._service = None
        return self.service()
