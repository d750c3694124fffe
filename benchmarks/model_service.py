"""Overhead of the local model service against a plain torch loop on the same model and batch.

Measures, in one run and interleaved (so load from other processes hits both alike):
- forward_backward + optim_step tokens/s through the unmodified tinker SDK and HTTP,
  against forward, cross-entropy, backward and a torch AdamW step called directly;
- sampling tokens/s through the SDK, against a KV-cached sampling loop over the model.
The ratio is service time over plain-loop time (target: under 1.3). Both sides draw
tokens by inverse CDF: `torch.multinomial` over Qwen3's 151k-token vocabulary costs
tens of milliseconds per step on CPU and would make any loop using it look slow.

    .venv/bin/python benchmarks/model_service.py                       # CPU, synth/qwen3-tiny
    .venv/bin/python benchmarks/model_service.py --shape qwen3-1.7b    # random-init 1.7B, on cuda
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tinker
import torch
from tinker import types
from transformers import Qwen3Config, Qwen3ForCausalLM

from synth_pipelines.rendering.model_names import QWEN3_TINY
from synth_pipelines.tinker_local.app import create_app
from synth_pipelines.tinker_local.backbone import Backbone, load_backbone, qwen3_tokenizer_dir
from synth_pipelines.tinker_local.lora import Adapter, LoraSlots, LoraSpec
from synth_pipelines.tinker_local.server import serving

QWEN3_1_7B = Qwen3Config(
    vocab_size=151_936,
    hidden_size=2048,
    intermediate_size=6144,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=40_960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    eos_token_id=151645,
)


@dataclass(frozen=True)
class Workload:
    batch: int
    sequence: int
    samples: int
    prompt: int
    new_tokens: int


WORKLOADS = {
    "qwen3-tiny": Workload(batch=8, sequence=128, samples=8, prompt=64, new_tokens=64),
    "qwen3-1.7b": Workload(batch=8, sequence=1024, samples=32, prompt=512, new_tokens=128),
}
RANK = 32
ADAM = types.AdamParams(learning_rate=1e-4)


def random_qwen3_directory(config: Qwen3Config, root: Path) -> str:
    """A Hugging Face directory holding a seeded random-init model and the Qwen3 tokenizer."""
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(root)
    for file in qwen3_tokenizer_dir().iterdir():
        shutil.copy(file, root / file.name)
    return str(root)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device: torch.device, work: Callable[[], object]) -> float:
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start


class PlainLoop:
    """The same network, adapter shape and optimizer, called directly."""

    def __init__(self, backbone: Backbone):
        self.backbone = backbone
        slots = LoraSlots.install(backbone.network)
        self.adapter: Adapter = slots.new_adapter(LoraSpec(rank=RANK), seed=0).trainable()
        slots.attach(self.adapter)
        self.optimizer = torch.optim.AdamW(
            self.adapter.parameters(), lr=ADAM.learning_rate, betas=(0.9, 0.95), eps=1e-12
        )

    def train_step(self, tokens: torch.Tensor, targets: torch.Tensor) -> None:
        logits = self.backbone.network(input_ids=tokens).logits.float()
        logprobs = logits.log_softmax(-1).gather(-1, targets[..., None]).squeeze(-1)
        (-logprobs.sum()).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    @torch.inference_mode()
    def sample(self, prompt: list[int], samples: int, new_tokens: int, seed: int) -> None:
        network = self.backbone.network
        generator = torch.Generator(self.backbone.device).manual_seed(seed)
        ids = torch.tensor([prompt], device=self.backbone.device)
        out = network(input_ids=ids, use_cache=True)
        cache = out.past_key_values
        cache.batch_repeat_interleave(samples)
        logits = out.logits[:, -1].float().expand(samples, -1)
        for step in range(new_tokens):
            logprobs = logits.log_softmax(-1)
            cdf = logprobs.exp().cumsum(-1)
            uniform = torch.rand(samples, 1, generator=generator, device=cdf.device)
            token = torch.searchsorted(cdf, uniform * cdf[:, -1:], right=True)
            token = token.clamp_max(cdf.shape[-1] - 1)
            logprobs.gather(1, token).cpu()
            if step + 1 < new_tokens:
                out = network(input_ids=token, past_key_values=cache, use_cache=True)
                cache, logits = out.past_key_values, out.logits[:, -1].float()


def measure(args: argparse.Namespace) -> dict[str, float]:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    workload = WORKLOADS[args.shape]
    with tempfile.TemporaryDirectory() as scratch:
        base_model = QWEN3_TINY
        if args.shape == "qwen3-1.7b":
            base_model = random_qwen3_directory(QWEN3_1_7B, Path(scratch) / "model")
        plain = PlainLoop(load_backbone(base_model, device))
        vocab = plain.backbone.vocab_size
        generator = torch.Generator().manual_seed(1)
        sequences = torch.randint(
            0, min(vocab, 151_669), (workload.batch, workload.sequence + 1), generator=generator
        )
        tokens, targets = sequences[:, :-1].to(device), sequences[:, 1:].to(device)
        data = [
            types.Datum(
                model_input=types.ModelInput.from_ints(row[:-1].tolist()),
                loss_fn_inputs={"target_tokens": row[1:].tolist(), "weights": [1.0] * len(row[1:])},
            )
            for row in sequences
        ]
        prompt = sequences[0, : workload.prompt].tolist()
        app = create_app(
            base_model, object_store_url=f"file://{scratch}/objects", device=str(device)
        )
        with serving(app) as url:
            client = tinker.ServiceClient(base_url=url, api_key="tml-benchmark")
            training = client.create_lora_training_client(base_model, rank=RANK, seed=0).result()
            sampler = training.save_weights_and_get_sampling_client().result()
            params = types.SamplingParams(max_tokens=workload.new_tokens, stop=[], seed=2)

            def service_train() -> None:
                step = training.forward_backward(data, "cross_entropy")
                training.optim_step(ADAM).result()
                step.result()

            def service_sample() -> None:
                sampler.sample(
                    types.ModelInput.from_ints(prompt), workload.samples, params
                ).result()

            runs: dict[str, list[float]] = {
                "train_service": [],
                "train_plain": [],
                "sample_service": [],
                "sample_plain": [],
            }
            for iteration in range(args.iterations + 1):
                pairs = {
                    "train_service": service_train,
                    "train_plain": lambda: plain.train_step(tokens, targets),
                    "sample_service": service_sample,
                    "sample_plain": lambda: plain.sample(
                        prompt, workload.samples, workload.new_tokens, seed=2
                    ),
                }
                for name, work in pairs.items():
                    seconds = timed(device, work)
                    if iteration:
                        runs[name].append(seconds)
            client.close("success").result()
    train_tokens = workload.batch * workload.sequence
    sample_tokens = workload.samples * workload.new_tokens
    median = {name: statistics.median(values) for name, values in runs.items()}
    return {
        "train_tokens_per_s_service": train_tokens / median["train_service"],
        "train_tokens_per_s_plain": train_tokens / median["train_plain"],
        "train_ratio": median["train_service"] / median["train_plain"],
        "sample_tokens_per_s_service": sample_tokens / median["sample_service"],
        "sample_tokens_per_s_plain": sample_tokens / median["sample_plain"],
        "sample_ratio": median["sample_service"] / median["sample_plain"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(WORKLOADS), default="qwen3-tiny")
    parser.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--iterations", type=int, default=5)
    args = parser.parse_args()
    results = measure(args)
    workload = WORKLOADS[args.shape]
    print(f"model service vs plain torch loop ({args.shape}, {workload})")
    print(
        f"  forward_backward+optim_step: {results['train_tokens_per_s_service']:9.1f} tok/s "
        f"service, {results['train_tokens_per_s_plain']:9.1f} tok/s plain, "
        f"ratio {results['train_ratio']:.3f}"
    )
    print(
        f"  sampling:                    {results['sample_tokens_per_s_service']:9.1f} tok/s "
        f"service, {results['sample_tokens_per_s_plain']:9.1f} tok/s plain, "
        f"ratio {results['sample_ratio']:.3f}"
    )
    print(json.dumps({"shape": args.shape, **results}))


if __name__ == "__main__":
    main()
