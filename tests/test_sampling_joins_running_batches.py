"""A short sampling request never waits for a long batch to end.

Before, the model service decoded each batch to its longest row before it answered any
request in it, and a request that arrived meanwhile waited for the whole batch: one
caller's concurrent long calls held an independent one-token call for seconds, whatever
the proxy's per-token limits. Now a request is answered as soon as its own rows stop,
and one that arrives while a batch runs joins it at the next step. What a joined request
samples is still the model's own: its logprobs equal a full forward pass over its tokens.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import numpy as np
import torch

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.backbone import load_backbone
from synth_pipelines.tinker_local.engine import Engine
from synth_pipelines.tinker_local.lora import LoraSlots
from synth_pipelines.tinker_local.outcomes import JsonResult, Outcome
from synth_pipelines.tinker_local.sampling import DecodeParams, SampleJob, SampleOutput, Sampler

TOLERANCE = 1e-4
LONG_PROMPT = (151644, 872, 198, 3838, 374, 220, 17, 10, 17, 30, 151645, 198, 151644, 77091, 198)
SHORT_PROMPTS = ((9707, 1879), (151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198, 9707))


def sampler() -> tuple[Sampler, LoraSlots]:
    backbone = load_backbone(QWEN3_TINY, torch.device("cpu"))
    return Sampler(backbone), LoraSlots.install(backbone.network)


def forward_logprobs(sampler: Sampler, prompt: tuple[int, ...], tokens: list[int]) -> np.ndarray:
    full = torch.tensor(prompt + tuple(tokens))
    with torch.no_grad():
        logits = sampler.backbone.network(input_ids=full[None]).logits[0].float()
    logprobs = torch.log_softmax(logits, -1)[:-1].gather(1, full[1:, None]).squeeze(1)
    return logprobs[len(prompt) - 1 :].numpy()


def test_requests_joining_a_running_batch_finish_first_with_the_models_own_logprobs() -> None:
    model, _slots = sampler()
    long_job = SampleJob(LONG_PROMPT, 2, DecodeParams(max_tokens=40, seed=1))
    short_jobs = [
        SampleJob(prompt, 1, DecodeParams(max_tokens=3, seed=index))
        for index, prompt in enumerate(SHORT_PROMPTS)
    ]
    answered: list[tuple[int, SampleOutput]] = []
    steps = 0

    def admit(room: int) -> list[SampleJob]:
        nonlocal steps
        steps += 1
        # The first short job arrives at the 5th step, the second (longer prompt than the
        # batch so far) at the 8th: both join mid-batch.
        return [short_jobs[{5: 0, 8: 1}[steps]]] if steps in (5, 8) else []

    with torch.inference_mode():
        model.serve([long_job], lambda index, output: answered.append((index, output)), admit)
    assert [index for index, _ in answered] == [1, 2, 0]
    outputs = dict(answered)
    for index, job in ((0, long_job), (1, short_jobs[0]), (2, short_jobs[1])):
        for sequence in outputs[index].sequences:
            assert len(sequence.tokens) == job.params.max_tokens
            expected = forward_logprobs(model, job.prompt, sequence.tokens)
            np.testing.assert_allclose(sequence.logprobs, expected, atol=TOLERANCE)


def test_an_engine_answers_a_one_token_call_while_a_long_batch_decodes() -> None:
    model, slots = sampler()
    engine = Engine(slots, model)
    engine.start()
    try:
        finished: dict[str, float] = {}

        def submit(name: str, job: SampleJob) -> Future[Outcome]:
            future: Future[Outcome] = Future()
            future.add_done_callback(lambda _: finished.setdefault(name, time.monotonic()))
            engine.sample(
                None, job, lambda output: JsonResult({"rows": len(output.sequences)}), future
            )
            return future

        long_future = submit("long", SampleJob(LONG_PROMPT, 8, DecodeParams(max_tokens=400)))
        time.sleep(0.5)  # the long batch is decoding by now
        asked = time.monotonic()
        short_future = submit("short", SampleJob(SHORT_PROMPTS[0], 1, DecodeParams(max_tokens=1)))
        short_future.result(timeout=120)
        waited = finished["short"] - asked
        long_future.result(timeout=600)
    finally:
        threading.Thread(target=engine.stop).start()
    assert finished["short"] < finished["long"]
    assert waited < 0.1 * (finished["long"] - asked), (waited, finished["long"] - asked)
