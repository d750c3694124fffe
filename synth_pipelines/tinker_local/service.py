"""The model service: what each Tinker endpoint does, independent of HTTP.

Submissions answer at once with a request id; the work runs on the engine thread,
in seq_id order per training model, and its outcome waits in `pending` for the
client's poll. Bad input becomes a user-category failure of that request only.
"""

from __future__ import annotations

import functools
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tinker import types

from synth_pipelines.tinker_local.base_models import BaseModels, LoadedModel
from synth_pipelines.tinker_local.checkpoints import Checkpoint, CheckpointPath, CheckpointStore
from synth_pipelines.tinker_local.datums import training_datums
from synth_pipelines.tinker_local.errors import UserError
from synth_pipelines.tinker_local.lora import Adapter, LoraSpec
from synth_pipelines.tinker_local.losses import resolve_loss
from synth_pipelines.tinker_local.outcomes import Failure, JsonResult, Outcome, ProtoResult
from synth_pipelines.tinker_local.pending import PendingResults
from synth_pipelines.tinker_local.registry import Registry, RunSlot
from synth_pipelines.tinker_local.sample_requests import sample_job
from synth_pipelines.tinker_local.sampling import SampleJob
from synth_pipelines.tinker_local.scripted import Script, forced_completion
from synth_pipelines.tinker_local.training import TrainingRun
from synth_pipelines.tinker_local.wire import (
    ForwardBackwardCall,
    encode_forward_backward_output,
    encode_sample_response,
)

Answer = dict[str, Any]
CHECKPOINT_ADAPTERS_KEPT = 32


class ModelService:
    def __init__(self, models: BaseModels, checkpoints: CheckpointStore, script: Script | None):
        self.models = models
        self.checkpoints = checkpoints
        self.script = script
        self.registry = Registry()
        self.pending = PendingResults()
        self._checkpoint_adapters: OrderedDict[str, tuple[str, Adapter]] = OrderedDict()
        self._adapters_lock = threading.Lock()
        models.in_use = self.registry.uses

    def start(self) -> None:
        """Load the first served model now, so the service is warm for it."""
        self.models.get(self.models.served()[0])

    def stop(self) -> None:
        self.models.stop()

    # Submissions --------------------------------------------------------------------

    def _failed(self, error: UserError, **extra: Any) -> Answer:
        request_id, future = self.pending.open()
        future.set_result(Failure(str(error), "user"))
        return {"request_id": request_id, **extra}

    def _submit_creation(
        self, model: LoadedModel, slot: RunSlot, build: Callable[[], TrainingRun], result: Answer
    ) -> Answer:
        """Build the training model `slot` on `model`'s engine; its poll answers `result`."""
        request_id, future = self.pending.open()

        def work() -> Outcome:
            slot.build(build)
            return JsonResult(result)

        model.engine.run(work, future)
        return {"request_id": request_id, "model_id": slot.model_id}

    def _submit_ordered(
        self, model_id: str, seq_id: int | None, work: Callable[[RunSlot], Outcome]
    ) -> Answer:
        """Run `work` on the training model `model_id`, in seq_id order, on its base model's
        engine; an unknown model fails the request."""
        request_id, future = self.pending.open()
        try:
            slot = self.registry.run(model_id)
            engine = self.models.get(slot.base_model).engine
            slot.queue.submit(seq_id, lambda: engine.run(lambda: work(slot), future))
        except UserError as error:
            future.set_result(Failure(str(error), "user"))
        return {"request_id": request_id, "model_id": model_id}

    # Training -------------------------------------------------------------------------

    def create_model(self, request: types.CreateModelRequest) -> Answer:
        try:
            session = self.registry.session(request.session_id)
            model = self.models.get(request.base_model)
            _check_optimizer(request.optimizer_config)
            spec = _lora_spec(request.lora_config)
            model.slots.targets(spec)
            slot = self.registry.add_run(session, request.model_seq_id, model.backbone.name)
        except UserError as error:
            return self._failed(error)
        lora_config = request.lora_config
        seed = lora_config.seed if lora_config and lora_config.seed is not None else None

        def build() -> TrainingRun:
            adapter = model.slots.new_adapter(
                spec, seed if seed is not None else secrets.randbits(63)
            )
            return TrainingRun(slot.model_id, model.backbone, model.slots, adapter)

        created = types.CreateModelResponse(model_id=slot.model_id).model_dump()
        return self._submit_creation(model, slot, build, created)

    def get_info(self, model_id: str) -> types.GetInfoResponse:
        run = self.registry.run(model_id).ready()
        backbone = run.backbone
        return types.GetInfoResponse(
            model_id=model_id,
            model_data=types.ModelData(
                arch=backbone.arch,
                model_name=backbone.name,
                tokenizer_id=backbone.tokenizer_id,
            ),
            is_lora=True,
            lora_rank=run.adapter.spec.rank,
            model_name=backbone.name,
        )

    def forward_backward(self, call: ForwardBackwardCall) -> Answer:
        def work(slot: RunSlot) -> Outcome:
            run = slot.ready()
            loss, config = resolve_loss(call.loss_fn, call.loss_fn_config())
            datums = training_datums(
                call.datums(), loss, run.backbone.vocab_size, run.backbone.device
            )
            result = run.forward_backward(datums, loss, config, forward_only=call.forward_only)
            return ProtoResult(
                encode_forward_backward_output(
                    {"logprobs": result.logprobs, "elementwise_loss": result.elementwise_loss},
                    {"loss:sum": result.loss_sum},
                )
            )

        return self._submit_ordered(call.model_id, call.seq_id, work)

    def optim_step(self, request: types.OptimStepRequest) -> Answer:
        def work(slot: RunSlot) -> Outcome:
            params = request.optim_params
            if not isinstance(params, types.AdamParams):
                raise UserError(
                    f"the local service trains with AdamW only; got {type(params).__name__} "
                    "optimizer params, send AdamParams"
                )
            metrics = slot.ready().optim_step(params)
            return JsonResult(types.OptimStepResponse(metrics=metrics).model_dump())

        return self._submit_ordered(request.model_id, request.seq_id, work)

    def save_weights(self, request: types.SaveWeightsRequest) -> Answer:
        def work(slot: RunSlot) -> Outcome:
            path = CheckpointPath.new(slot.model_id, "weights", _name(request.path))
            self._save(path, slot.ready(), with_optimizer=True)
            return JsonResult({"path": path.uri, "type": "save_weights"})

        return self._submit_ordered(request.model_id, request.seq_id, work)

    def save_weights_for_sampler(self, request: types.SaveWeightsForSamplerRequest) -> Answer:
        def work(slot: RunSlot) -> Outcome:
            run = slot.ready()
            if request.path is not None:
                path = CheckpointPath.new(slot.model_id, "sampler_weights", request.path)
                self._save(path, run, with_optimizer=False)
                return JsonResult({"path": path.uri, "type": "save_weights_for_sampler"})
            if request.sampling_session_seq_id is None:
                raise UserError(
                    "save_weights_for_sampler needs a path or a sampling_session_seq_id"
                )
            sampler = self.registry.add_snapshot_sampler(
                self.registry.session(slot.session_id),
                request.sampling_session_seq_id,
                slot,
                run.backbone.name,
                run.adapter.frozen_copy(),
            )
            return JsonResult(
                {"sampling_session_id": sampler.sampler_id, "type": "save_weights_for_sampler"}
            )

        return self._submit_ordered(request.model_id, request.seq_id, work)

    def _save(self, path: CheckpointPath, run: TrainingRun, *, with_optimizer: bool) -> None:
        self.checkpoints.save(
            path,
            Checkpoint(
                base_model=run.backbone.name,
                spec=run.adapter.spec,
                adapter={name: tensor for name, tensor in run.adapter.named_parameters()},
                optimizer=run.optimizer_tensors() if with_optimizer else None,
            ),
        )

    def load_weights(self, request: types.LoadWeightsRequest) -> Answer:
        if request.session_id is not None:
            return self._create_from_checkpoint(request)
        if request.model_id is None:
            error = UserError("load_weights needs either session_id and model_seq_id, or model_id")
            return self._failed(error, model_id=None)

        def work(slot: RunSlot) -> Outcome:
            run = slot.ready()
            path = CheckpointPath.parse(request.path)
            checkpoint = self._load_checkpoint(path, optimizer=request.optimizer)
            if checkpoint.base_model != run.backbone.name:
                raise UserError(
                    f"{path.uri} was trained on {checkpoint.base_model!r}, but model "
                    f"{slot.model_id} is {run.backbone.name!r}"
                )
            if checkpoint.spec != run.adapter.spec:
                raise UserError(
                    f"{path.uri} has LoRA config {checkpoint.spec}, but model {slot.model_id} "
                    f"has {run.adapter.spec}; create a new training client from the checkpoint"
                )
            run.load(checkpoint.adapter, checkpoint.optimizer if request.optimizer else None)
            return JsonResult({"path": path.uri, "model_id": slot.model_id, "type": "load_weights"})

        return self._submit_ordered(request.model_id, request.seq_id, work)

    def _create_from_checkpoint(self, request: types.LoadWeightsRequest) -> Answer:
        try:
            session = self.registry.session(request.session_id or "")
            if request.model_seq_id is None:
                raise UserError("load_weights with a session_id needs model_seq_id")
            path = CheckpointPath.parse(request.path)
            model = self.models.get(request.base_model or self.checkpoints.base_model(path))
            if request.optimizer_config is not None:
                _check_optimizer(request.optimizer_config)
            slot = self.registry.add_run(session, request.model_seq_id, model.backbone.name)
        except UserError as error:
            return self._failed(error)

        def build() -> TrainingRun:
            checkpoint = self._load_checkpoint(path, optimizer=request.optimizer)
            if checkpoint.base_model != model.backbone.name:
                raise UserError(
                    f"{path.uri} was trained on {checkpoint.base_model!r}, not on "
                    f"{model.backbone.name!r}; create the training client for its base model"
                )
            adapter = model.slots.adapter_from_tensors(checkpoint.spec, checkpoint.adapter)
            run = TrainingRun(slot.model_id, model.backbone, model.slots, adapter)
            if request.optimizer and checkpoint.optimizer is not None:
                run.restore_optimizer(checkpoint.optimizer)
            return run

        loaded = {"path": path.uri, "model_id": slot.model_id, "type": "load_weights"}
        return self._submit_creation(model, slot, build, loaded)

    def _load_checkpoint(self, path: CheckpointPath, *, optimizer: bool) -> Checkpoint:
        checkpoint = self.checkpoints.load(path)
        self.models.get(checkpoint.base_model)
        if optimizer and checkpoint.optimizer is None:
            raise UserError(
                f"{path.uri} holds sampler weights without optimizer state; load a "
                "tinker://.../weights/... checkpoint saved with save_state"
            )
        return checkpoint

    def prepare_base_model(self, name: str | None, checkpoint: str | None = None) -> None:
        """Load the base model a request names, or its checkpoint was trained on, ahead of
        the request: loading takes seconds, so the routes call this in a thread. A problem
        is left for the request itself to report."""
        try:
            if name is None and checkpoint is not None:
                name = self.checkpoints.base_model(CheckpointPath.parse(checkpoint))
            if name is not None:
                self.models.get(name)
        except UserError:
            pass

    # Sampling -------------------------------------------------------------------------

    def create_sampling_session(self, request: types.CreateSamplingSessionRequest) -> str:
        session = self.registry.session(request.session_id)
        adapter: Adapter | None = None
        base_model = request.base_model
        if request.model_path is not None:
            base_model, adapter = self._checkpoint_adapter(CheckpointPath.parse(request.model_path))
            if request.base_model is not None and request.base_model != base_model:
                raise UserError(
                    f"{request.model_path} was trained on {base_model!r}, not on "
                    f"{request.base_model!r}"
                )
        elif base_model is None:
            raise UserError("create_sampling_session needs a model_path or a base_model")
        self.models.get(base_model)
        sampler = self.registry.add_sampler(
            session,
            request.sampling_session_seq_id,
            base_model,
            request.model_path,
            adapter,
        )
        return sampler.sampler_id

    def _checkpoint_adapter(self, path: CheckpointPath) -> tuple[str, Adapter]:
        """(base model, adapter): one shared adapter per checkpoint, since checkpoints never
        change and samplers that share weights are decoded in one batch."""
        with self._adapters_lock:
            cached = self._checkpoint_adapters.get(path.uri)
            if cached is not None:
                self._checkpoint_adapters.move_to_end(path.uri)
                return cached
        checkpoint = self._load_checkpoint(path, optimizer=False)
        slots = self.models.get(checkpoint.base_model).slots
        entry = (
            checkpoint.base_model,
            slots.adapter_from_tensors(checkpoint.spec, checkpoint.adapter),
        )
        with self._adapters_lock:
            entry = self._checkpoint_adapters.setdefault(path.uri, entry)
            while len(self._checkpoint_adapters) > CHECKPOINT_ADAPTERS_KEPT:
                self._checkpoint_adapters.popitem(last=False)
        return entry

    def get_sampler(self, sampler_id: str) -> types.GetSamplerResponse:
        sampler = self.registry.sampler(sampler_id)
        return types.GetSamplerResponse(
            sampler_id=sampler.sampler_id,
            base_model=sampler.base_model,
            model_path=sampler.model_path,
        )

    def asample(self, request: types.SampleRequest) -> Answer:
        request_id, future = self.pending.open()
        sequence_ids = [f"{request_id}:{index}" for index in range(request.num_samples)]
        answer = {"request_id": request_id, "sample_sequence_ids": sequence_ids}
        try:
            if request.sampling_session_id is None:
                raise UserError("asample needs a sampling_session_id: create a sampling client")
            sampler = self.registry.sampler(request.sampling_session_id)
            model = self.models.get(sampler.base_model)
            job = self._scripted(sample_job(request, model.backbone), model)
        except UserError as error:
            future.set_result(Failure(str(error), "user"))
            return answer
        model.engine.sample(
            sampler.adapter,
            job,
            lambda output: ProtoResult(encode_sample_response(output)),
            future,
        )
        return answer

    def _scripted(self, job: SampleJob, model: LoadedModel) -> SampleJob:
        if self.script is None:
            return job
        tokenizer = model.backbone.tokenizer
        prompt = functools.cache(
            lambda: tokenizer.decode(list(job.prompt), skip_special_tokens=False)
        )
        # One sequence of ids decodes to one str; transformers types every result as
        # `str | list[str]`.
        entries = self.script.take(prompt, job.num_samples)  # type: ignore[arg-type]
        if (job.scoring is not None or job.topk_sample) and any(
            entry.logprob is not None for entry in entries
        ):
            raise UserError(
                "this request asks for prompt or top-k logprobs, which need the model, but its "
                "scripted entry sets a constant logprob; PUT an entry without `logprob`"
            )
        forced = tuple(forced_completion(entry, job.params, model.backbone) for entry in entries)
        return SampleJob(
            prompt=job.prompt,
            num_samples=job.num_samples,
            params=job.params,
            scoring=job.scoring,
            topk_sample=job.topk_sample,
            forced=forced,
        )


def _check_optimizer(optimizer_config: types.OptimizerConfig) -> None:
    if optimizer_config.type != "adamw":
        raise UserError(
            f"the local service trains with AdamW only, not {optimizer_config.type!r}; "
            "leave optimizer unset or pass AdamOptimizerConfig()"
        )


def _lora_spec(lora_config: types.LoraConfig | None) -> LoraSpec:
    if lora_config is None:
        raise UserError("the local service trains LoRA adapters only: give a lora_config")
    if lora_config.rank < 1:
        raise UserError(f"LoRA rank must be at least 1, got {lora_config.rank}")
    return LoraSpec(
        rank=lora_config.rank,
        train_attn=lora_config.train_attn,
        train_mlp=lora_config.train_mlp,
        train_unembed=lora_config.train_unembed,
    )


def _name(path: str | None) -> str:
    if not path:
        raise UserError("save_state needs a checkpoint name")
    return path
