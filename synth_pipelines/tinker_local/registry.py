"""The service's live objects: sessions, training runs and samplers, by their wire ids.

Only checkpoints outlive the process; everything here is rebuilt by clients after a
restart (a new session, then training clients and samplers from saved paths).
"""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from synth_pipelines.tinker_local.errors import NotFoundError, UserError
from synth_pipelines.tinker_local.lora import Adapter
from synth_pipelines.tinker_local.ordering import SequencedQueue
from synth_pipelines.tinker_local.training import TrainingRun

SNAPSHOTS_KEPT_PER_MODEL = 16


@dataclass
class Session:
    session_id: str
    finished: bool = False
    model_ids: list[str] = field(default_factory=list)
    sampler_ids: list[str] = field(default_factory=list)


@dataclass
class RunSlot:
    """A training model: known from its creation request on, usable once the engine built it."""

    model_id: str
    session_id: str
    base_model: str
    queue: SequencedQueue
    run: TrainingRun | None = None
    creation_error: str | None = None
    snapshot_sampler_ids: deque[str] = field(default_factory=deque)

    def build(self, construct: Callable[[], TrainingRun]) -> None:
        """Create the run, remembering why if that fails so later requests can say so."""
        try:
            self.run = construct()
        except Exception as error:
            self.creation_error = str(error)
            raise

    def ready(self) -> TrainingRun:
        if self.run is None:
            raise UserError(
                f"model {self.model_id} could not be created ({self.creation_error}); "
                "create a new training client"
            )
        return self.run


@dataclass(frozen=True)
class SamplingSession:
    """What a sampling client samples from: the base model, or it plus an adapter."""

    sampler_id: str
    base_model: str
    model_path: str | None
    adapter: Adapter | None


class Registry:
    """Shared by the event loop, the engine thread and request worker threads, hence the lock."""

    def __init__(self) -> None:
        self.sessions: dict[str, Session] = {}
        self.runs: dict[str, RunSlot] = {}
        self.samplers: dict[str, SamplingSession] = {}
        self._lock = threading.Lock()

    def new_session(self) -> Session:
        session = Session(str(uuid.uuid4()))
        with self._lock:
            self.sessions[session.session_id] = session
        return session

    def session(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is None:
            raise NotFoundError(
                f"unknown session {session_id!r}: the model service may have restarted; "
                "create a new ServiceClient"
            )
        if session.finished:
            raise UserError(f"session {session_id} has finished; create a new ServiceClient")
        return session

    def active(self, session_id: str) -> bool:
        session = self.sessions.get(session_id)
        return session is not None and not session.finished

    def add_run(self, session: Session, model_seq_id: int, base_model: str) -> RunSlot:
        model_id = f"{session.session_id}:train:{model_seq_id}"
        with self._lock:
            if model_id in self.runs:
                raise UserError(
                    f"model {model_id} already exists; each training client needs a new seq id"
                )
            slot = RunSlot(model_id, session.session_id, base_model, SequencedQueue(model_id))
            self.runs[model_id] = slot
            session.model_ids.append(model_id)
        return slot

    def run(self, model_id: str) -> RunSlot:
        slot = self.runs.get(model_id)
        if slot is None:
            raise NotFoundError(
                f"unknown model id {model_id!r}: create it with create_lora_training_client "
                "or create_training_client_from_state (ids look like '<session>:train:<n>')"
            )
        return slot

    def add_sampler(
        self,
        session: Session,
        sampling_session_seq_id: int,
        base_model: str,
        model_path: str | None,
        adapter: Adapter | None,
    ) -> SamplingSession:
        sampler = SamplingSession(
            f"{session.session_id}:sample:{sampling_session_seq_id}",
            base_model,
            model_path,
            adapter,
        )
        with self._lock:
            self.samplers[sampler.sampler_id] = sampler
            session.sampler_ids.append(sampler.sampler_id)
        return sampler

    def add_snapshot_sampler(
        self,
        session: Session,
        sampling_session_seq_id: int,
        slot: RunSlot,
        base_model: str,
        adapter: Adapter,
    ) -> SamplingSession:
        """A sampler over a copy of a run's current weights; only the newest few are kept.

        RL loops take one such snapshot per step and never release the old ones.
        """
        sampler = self.add_sampler(session, sampling_session_seq_id, base_model, None, adapter)
        with self._lock:
            slot.snapshot_sampler_ids.append(sampler.sampler_id)
            while len(slot.snapshot_sampler_ids) > SNAPSHOTS_KEPT_PER_MODEL:
                self.samplers.pop(slot.snapshot_sampler_ids.popleft(), None)
        return sampler

    def uses(self, base_model: str) -> bool:
        """Whether a training client or a sampler still refers to the base model."""
        with self._lock:
            return any(slot.base_model == base_model for slot in self.runs.values()) or any(
                sampler.base_model == base_model for sampler in self.samplers.values()
            )

    def sampler(self, sampler_id: str) -> SamplingSession:
        sampler = self.samplers.get(sampler_id)
        if sampler is None:
            raise NotFoundError(
                f"unknown sampling session {sampler_id!r}: create a sampling client first. "
                f"The service keeps the {SNAPSHOTS_KEPT_PER_MODEL} newest "
                "save_weights_and_get_sampling_client snapshots per model, and nothing "
                "across a restart"
            )
        return sampler

    def finish(self, session_id: str) -> None:
        """Drop the session's models and samplers; their saved checkpoints stay in the store."""
        with self._lock:
            session = self.sessions.get(session_id)
            if session is None:
                return
            session.finished = True
            for model_id in session.model_ids:
                self.runs.pop(model_id, None)
            for sampler_id in session.sampler_ids:
                self.samplers.pop(sampler_id, None)
