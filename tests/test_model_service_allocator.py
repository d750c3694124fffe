"""The model service keeps freed tensor memory for reuse instead of faulting it in again.

Each process runs in a subprocess: the allocator setting is process-wide and cannot be
undone, and a default process is the baseline that shows what the setting changes.
"""

from __future__ import annotations

import json
import subprocess
import sys

# Scoring rows against Qwen3's vocabulary, as the service does: each call makes logits of
# 39 MB and a normalised copy, both over glibc's largest mmap threshold.
PROBE = """
import json, resource, sys
import torch
if sys.argv[1] == "keep":
    from synth_pipelines.tinker_local.allocator import keep_freed_memory
    assert keep_freed_memory()
rows, vocab = 64, 151936
weight, hidden = torch.randn(vocab, 128), torch.randn(rows, 128)
def score():
    logits = torch.nn.functional.linear(hidden, weight)
    return logits - logits.logsumexp(-1, keepdim=True)
score()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(4):
    score()
faulted = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) * resource.getpagesize()
print(json.dumps({"faulted_share": faulted / (4 * 2 * rows * vocab * 4)}))
"""


def faulted_share(mode: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)["faulted_share"]


def test_freed_logits_are_reused_instead_of_faulted_in_again():
    default, keep = faulted_share("default"), faulted_share("keep")
    assert default > 1.0  # every call maps its tensors afresh (measured: 1.5)
    assert keep < default / 2  # measured: 0.375
