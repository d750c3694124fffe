"""How soon a warm start on Claude Code's captured calls learns to read the answer word.

The `learn` tasks' answer is the instruction's last word, so what a warm start must learn
beyond the tool-call format is to copy that word into the command. This trains warm starts
as the platform does (the captured run's examples packed per attempt, `plans/warm-start.json`'s
steps, demonstrations per step, learning rate and seed order) against an in-process model
service, once per LoRA rank, and every `--probe-every` steps scores the probability of the
right word where the command names it, on held-out and training instructions. The baseline is
the first rank given, measured in the same run; the last column is each rank's mean over the
held-out instructions as a ratio to the baseline's.

The probes are a diagnosis, not learning data: each puts a task's instruction into the user
turn of the run's first captured prompt (the one place the prompts of Claude Code's first
calls differ), followed by the teacher's completion up to the word.

.venv/bin/python -m benchmarks.warm_start_reading --captured-run RUN [--ranks 16,64]
    [--seeds 0,1] [--probe-every 16]   (services up; RUN: a teacher capture of
    profiles/claude-code-learner.json, as `scripts/demo-learning.sh --harness claude-code` makes)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import tinker
from transformers import AutoTokenizer

from synth_pipelines.config import Settings
from synth_pipelines.contracts.plan import WarmStartPlan
from synth_pipelines.control.database import engine_for
from synth_pipelines.learning.captured_demonstrations import CapturedExample, captured_examples
from synth_pipelines.learning.trainer import adam
from synth_pipelines.learning.warm_start import example_datum, step_choices
from synth_pipelines.rendering.model_names import QWEN3_LEARNER
from synth_pipelines.rendering.model_registry import configured_registry
from synth_pipelines.storage.objectstore import open_object_store
from synth_pipelines.tinker_local.allocator import keep_freed_memory
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import qwen3_tokenizer_dir
from synth_pipelines.tinker_local.server import serving

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("red", "blue", "green", "gold")


def probes(example: CapturedExample, tokenizer) -> dict[str, list[tuple[list[int], int]]]:
    """Per split, (tokens up to the word, the right word's token) for every task."""
    tokens = example.tokens
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    user = next(
        i + 3
        for i in range(len(tokens) - 1)
        if tokens[i] == im_start and tokenizer.decode(tokens[i + 1]) == "user"
    )
    end = tokens.index(im_end, user)
    # The instruction must tokenize alone as it did in the prompt, or the splice is not exact.
    assert tokenizer.encode(tokenizer.decode(tokens[user:end])) == tokens[user:end]
    word_ids = {w: tokenizer.encode(f" {w}") for w in WORDS}
    assert all(len(ids) == 1 for ids in word_ids.values()), word_ids
    weighted = [i for i in range(end, len(tokens)) if example.weights[i]]
    word_at = next(i for i in weighted if tokens[i] in {ids[0] for ids in word_ids.values()})
    before, after = tokens[:user], tokens[end:word_at]
    found: dict[str, list[tuple[list[int], int]]] = {}
    for split in ("heldout", "train"):
        for task in sorted((ROOT / "datasets/learn" / split).iterdir()):
            instruction = tokenizer.encode((task / "instruction.md").read_text())
            word = task.name.rsplit("-", 1)[1]
            found.setdefault(split, []).append((before + instruction + after, word_ids[word][0]))
    return found


def right_word(client: tinker.TrainingClient, probed: list[tuple[list[int], int]]) -> float:
    batch = [example_datum([*prefix, word], [0.0] * len(prefix) + [1.0]) for prefix, word in probed]
    scored = client.forward(batch, "cross_entropy").result().loss_fn_outputs
    return sum(float(out["logprobs"].to_torch()[-1].exp()) for out in scored) / len(scored)


def warm_start(
    service: tinker.ServiceClient,
    per_attempt: list[list[CapturedExample]],
    plan: WarmStartPlan,
    rank: int,
    probe_every: int,
    probed: dict[str, list[tuple[list[int], int]]],
) -> list[tuple[int, float, float, float]]:
    """(step, P(right word) held out, on training tasks, seconds) at every probe."""
    client = service.create_lora_training_client(
        base_model=QWEN3_LEARNER, rank=rank, seed=plan.seed
    ).result()
    optimizer = adam(plan.learning_rate)
    rows, started = [], time.monotonic()
    for step, chosen in enumerate(step_choices(len(per_attempt), plan), start=1):
        batch = [example_datum(e.tokens, e.weights) for i in chosen for e in per_attempt[i]]
        client.forward_backward(batch, "cross_entropy").result()
        client.optim_step(optimizer).result()
        if step % probe_every == 0 or step == plan.steps:
            held, train = right_word(client, probed["heldout"]), right_word(client, probed["train"])
            rows.append((step, held, train, time.monotonic() - started))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--captured-run", required=True)
    parser.add_argument("--ranks", default="16,64")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--probe-every", type=int, default=16)
    args = parser.parse_args()
    keep_freed_memory()  # as `synth model serve` does
    config = Settings()
    per_attempt = captured_examples(
        engine_for(config.control_database_url),
        open_object_store(config.objects_url),
        args.captured_run,
        configured_registry(config),
        QWEN3_LEARNER,
    )
    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir(), local_files_only=True)
    probed = probes(per_attempt[0][0], tokenizer)
    plan = WarmStartPlan.model_validate_json((ROOT / "plans/warm-start.json").read_text())
    ranks = [int(r) for r in args.ranks.split(",")]
    print(
        f"warm start on {len(per_attempt)} captured attempts: {plan.steps} steps of "
        f"{plan.demonstrations_per_step}, lr {plan.learning_rate}; mean P(right word) "
        f"over {len(probed['heldout'])} held-out and {len(probed['train'])} training instructions"
    )
    print("seed  rank  step  held-out  train  seconds  held-out / rank " + str(ranks[0]))
    with tempfile.TemporaryDirectory() as objects:
        app = create_app(QWEN3_LEARNER, object_store_url=f"file://{objects}")
        with serving(app) as url:
            service = tinker.ServiceClient(base_url=url, api_key="tml-benchmark")
            for seed in (int(s) for s in args.seeds.split(",")):
                baseline: dict[int, float] = {}
                for rank in ranks:
                    for step, held, train, seconds in warm_start(
                        service,
                        per_attempt,
                        plan.model_copy(update={"seed": seed}),
                        rank,
                        args.probe_every,
                        probed,
                    ):
                        if rank == ranks[0]:
                            baseline[step] = held
                        ratio = held / baseline[step] if baseline.get(step) else float("nan")
                        print(
                            f"{seed:>4}  {rank:>4}  {step:>4}  {held:8.3f}  {train:5.3f}  "
                            f"{seconds:7.0f}  {ratio:.2f}",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
