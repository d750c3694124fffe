"""GRPO recipes on the `learn` task family, measured through the tinker SDK.

Against the local model service: a warm start on the training tasks' demonstrations,
held-out pass@1 of the first turn (the `write_file` call decides the reward) at the
start, GRPO batches of groups sampled from the current policy (group-centred advantages,
importance-sampling loss, one optimizer step per batch), and held-out pass@1 again. The
baseline is the start checkpoint, measured in the same run; the script prints both, the
gain and Fisher's exact p. It isolates the recipe from the platform's per-attempt cost.

.venv/bin/python -m benchmarks.grpo_recipe [--warm-steps 40] [--batches 4] [--lr 3e-4]
    [--temperature 0.5] [--train-temperature T] [--balanced] [--carry-optimizer] [--seed 0]

By default GRPO starts with a fresh Adam state, as a platform run from a warm-start
checkpoint does; `--carry-optimizer` keeps the warm start's moments, whose momentum then
continues the supervised update into the first GRPO steps.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.data_processing import trajectory_to_data
from tinker_cookbook.rl.types import Trajectory, Transition

from synth_pipelines.config import Settings
from synth_pipelines.contracts.profile import Profile
from synth_pipelines.learning.demonstrations import (
    demonstration_turns,
    frame_request,
    harness_frame,
    read_demonstration,
)
from synth_pipelines.learning.trainer import adam
from synth_pipelines.learning.warm_start import turn_datum
from synth_pipelines.rendering.model_names import QWEN3_LEARNER
from synth_pipelines.rendering.model_registry import ModelRegistry
from synth_pipelines.runtime.comparison import Proportion, fisher_exact
from synth_pipelines.tinker_local.allocator import keep_freed_memory
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.server import serving

ROOT = Path(__file__).resolve().parents[1]


def _tasks(split: str) -> list[tuple[Path, str]]:
    return [
        (d, d.name.rsplit("-", 1)[1]) for d in sorted((ROOT / "datasets/learn" / split).iterdir())
    ]


def _reward(adapter, prompt, tokens, stop, word: str) -> tuple[float, str]:
    try:
        parsed = adapter.parse(prompt, tokens, stop)
    except Exception:  # a completion the renderer cannot parse earns nothing
        return 0.0, "unparsed"
    for block in parsed.content:
        if block.type == "tool_use" and block.name == "write_file":
            content = str(dict(block.input).get("content", "")).strip()
            return float(content == word), content[:12] or "empty"
    return 0.0, "no tool call"


def _datum(prompt: tinker.ModelInput, sequence, advantage: float) -> tinker.Datum:
    """One sampled completion packed by tinker-cookbook, as the platform packs a call; the
    mask stays local, as in the cookbook's training loop."""
    action = TokensWithLogprobs(tokens=list(sequence.tokens), maybe_logprobs=sequence.logprobs)
    step = Transition(ob=prompt, ac=action, reward=0.0, episode_done=True)
    (datum,) = trajectory_to_data(
        Trajectory(transitions=[step], final_ob=tinker.ModelInput.empty()), advantage
    )
    inputs = {name: value for name, value in datum.loss_fn_inputs.items() if name != "mask"}
    return tinker.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-steps", type=int, default=40)
    parser.add_argument("--warm-lr", type=float, default=3e-3)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--temperature", type=float, default=0.5, help="of the evaluations")
    parser.add_argument(
        "--train-temperature", type=float, help="of the GRPO groups (default: --temperature)"
    )
    parser.add_argument("--balanced", action="store_true", help="groups in dataset order")
    parser.add_argument("--eval-n", type=int, default=128)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--carry-optimizer",
        action="store_true",
        help="GRPO continues the warm start's Adam moments instead of a fresh optimizer",
    )
    args = parser.parse_args()
    keep_freed_memory()  # as `synth model serve` does
    rng = random.Random(args.seed)
    train_temperature = (
        args.temperature if args.train_temperature is None else args.train_temperature
    )
    adapter = ModelRegistry().get(QWEN3_LEARNER).adapter()
    frame = harness_frame(Profile.model_validate_json((ROOT / "profiles/learner.json").read_text()))

    def first_prompt(task: Path):
        message = {"role": "user", "content": read_demonstration(task).instruction}
        return adapter.render(frame_request(frame, [message]))

    train = [(first_prompt(d), w) for d, w in _tasks("train")]
    heldout = [(first_prompt(d), w) for d, w in _tasks("heldout")]
    started = time.monotonic()
    with serving(create_app(QWEN3_LEARNER, object_store_url=Settings().objects_url)) as url:
        service = tinker.ServiceClient(base_url=url, api_key="tml-synth-local")
        client = service.create_lora_training_client(
            base_model=QWEN3_LEARNER, rank=args.rank, seed=args.seed
        )
        demos = [
            [turn_datum(t) for t in demonstration_turns(adapter, frame, read_demonstration(d))]
            for d, _ in _tasks("train")
        ]
        optimizer, order = adam(args.warm_lr), []
        for _ in range(args.warm_steps):
            chosen = []
            while len(chosen) < 8:
                order = order or rng.sample(range(len(demos)), len(demos))
                chosen.append(order.pop())
            client.forward_backward([d for i in chosen for d in demos[i]], "cross_entropy").result()
            client.optim_step(optimizer).result()

        def params(seed: int, temperature: float = args.temperature) -> tinker.SamplingParams:
            return tinker.SamplingParams(
                max_tokens=args.max_tokens,
                temperature=temperature,
                stop=list(train[0][0].stop_token_ids),
                seed=seed,
            )

        def evaluate(sampler, label: str) -> Proportion:
            chosen = [heldout[i % len(heldout)] for i in range(args.eval_n)]
            futures = [
                (p, w, sampler.sample(tinker.ModelInput.from_ints(p.tokens), 1, params(10_000 + k)))
                for k, (p, w) in enumerate(chosen)
            ]
            passed = 0
            for prompt, word, future in futures:
                sequence = future.result().sequences[0]
                passed += int(
                    _reward(adapter, prompt, sequence.tokens, sequence.stop_reason, word)[0]
                )
            print(f"{label}: {passed}/{args.eval_n} held-out", flush=True)
            return Proportion(passed, args.eval_n)

        if not args.carry_optimizer:
            # As on the platform: GRPO starts from the warm start's weights, not its Adam
            # moments, so its first step is lr * sign(gradient) in every coordinate.
            state = client.save_state("warm").result().path
            client = service.create_training_client_from_state(state).result()
        sampler = client.save_weights_and_get_sampling_client()
        start = evaluate(sampler, "start")
        optimizer, order = adam(args.lr), []
        for index in range(args.batches):
            groups = []
            for _ in range(args.groups):
                if not order:
                    ring = list(range(len(train)))
                    order = ring[::-1] if args.balanced else rng.sample(ring, len(ring))
                prompt, word = train[order.pop()]
                future = sampler.sample(
                    tinker.ModelInput.from_ints(prompt.tokens),
                    args.group_size,
                    params(rng.randrange(1 << 30), train_temperature),
                )
                groups.append((prompt, word, future))
            datums, rewards, mixed = [], [], 0
            for prompt, word, future in groups:
                sequences = future.result().sequences
                scores = [
                    _reward(adapter, prompt, s.tokens, s.stop_reason, word)[0] for s in sequences
                ]
                rewards += scores
                mean = sum(scores) / len(scores)
                mixed += len(set(scores)) > 1
                datums += [
                    _datum(tinker.ModelInput.from_ints(prompt.tokens), s, r - mean)
                    for s, r in zip(sequences, scores, strict=True)
                    if r != mean
                ]
            if datums:
                client.forward_backward(datums, "importance_sampling").result()
                client.optim_step(optimizer).result()
            sampler = client.save_weights_and_get_sampling_client()
            print(
                f"batch {index}: reward {sum(rewards) / len(rewards):.3f}, mixed groups "
                f"{mixed}/{args.groups}, datums {len(datums)}, step {bool(datums)}",
                flush=True,
            )
        final = evaluate(sampler, "final")
    test = fisher_exact(start, final)
    print(
        json.dumps(
            {
                "start": start.rate,
                "final": final.rate,
                "gain": final.rate - start.rate,
                "fisher_p_two_sided": test.two_sided,
                "attempts": args.eval_n,
                "seconds": round(time.monotonic() - started),
                "args": vars(args),
            }
        )
    )


if __name__ == "__main__":
    main()
