"""Speculative decoding end to end through the offline API, float32 on the CPU:
lossless under greedy decoding, reproducible under seeds, and tidy with its KV."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import specserve
from specserve import LLM, SamplingParams

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n",
    "class Stack:\n    def push(self, item):",
    "    for i in range(len(items)):\n",
    "# Parse the command line\n",
    "def read_config(path):\n    with open(path) as f:",
    "try:\n    import json\nexcept ImportError:",
    "    return self._cache[key]\n\n    def",
]
MAX_TOKENS = 32


def make_llm(k: int | None = None, draft: str = "specserve/demo-draft", **kwargs: object) -> LLM:
    spec = None if k is None else {"model": draft, "num_speculative_tokens": k}
    options = {"dtype": "float32", "max_model_len": 512, **kwargs}
    return LLM("specserve/demo-target", speculative_config=spec, **options)  # type: ignore[arg-type]


def greedy_ids(llm: LLM, prompts: list[str], **params: object) -> list[list[int]]:
    sampling = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, **params)  # type: ignore[arg-type]
    return [o.outputs[0].token_ids for o in llm.generate(prompts, sampling, use_tqdm=False)]


def assert_all_blocks_free(llm: LLM) -> None:
    workers = llm.engine.workers
    for worker in (workers.target, workers.draft):
        if worker is not None:
            cache = worker.runner.kv_cache
            cache.check_integrity()
            assert cache.num_free_blocks == cache.num_blocks


@pytest.fixture(scope="module")
def target_only() -> LLM:
    return make_llm()


@pytest.fixture(scope="module")
def reference(target_only: LLM) -> list[list[int]]:
    return greedy_ids(target_only, PROMPTS)


def test_target_only_greedy_equals_transformers_generate(reference: list[list[int]]) -> None:
    folder = specserve.resolve_model("specserve/demo-target")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    for prompt, ours in zip(PROMPTS, reference, strict=True):
        ids = torch.tensor([tok.encode(prompt)])
        out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False)
        assert out[0, ids.shape[1] :].tolist() == ours, prompt


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculation_equals_target_only_greedy(k: int, reference: list[list[int]]) -> None:
    llm = make_llm(k)
    assert greedy_ids(llm, PROMPTS) == reference  # batch of 8
    assert [greedy_ids(llm, [p])[0] for p in PROMPTS[:3]] == reference[:3]  # batch of 1
    metrics = llm.speculation_stats()
    assert metrics["num_draft_tokens"] > 0 and metrics["acceptance_rate"] > 0.2
    assert_all_blocks_free(llm)


def test_text_is_the_decoded_tokens(target_only: LLM) -> None:
    tokenizer = target_only.get_tokenizer()
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    for out in target_only.generate(PROMPTS, params, use_tqdm=False):
        completion = out.outputs[0]
        assert completion.text == tokenizer.decode(completion.token_ids, skip_special_tokens=True)
        assert out.prompt_token_ids == tokenizer.encode(out.prompt)


def test_a_draft_identical_to_the_target_accepts_everything() -> None:
    llm = make_llm(4, draft="specserve/demo-target")
    greedy_ids(llm, PROMPTS[:4])
    assert llm.speculation_stats()["acceptance_rate"] > 0.99


def test_a_seeded_request_gives_the_same_text_alone_and_in_a_batch() -> None:
    llm = make_llm(3)
    params = SamplingParams(temperature=0.8, top_p=0.95, seed=1234, max_tokens=MAX_TOKENS)
    alone = llm.generate(PROMPTS[0], params, use_tqdm=False)[0].outputs[0]
    others = SamplingParams(temperature=1.0, max_tokens=MAX_TOKENS)
    batch = llm.generate(PROMPTS, [params] + [others] * (len(PROMPTS) - 1), use_tqdm=False)
    assert batch[0].outputs[0].token_ids == alone.token_ids
    assert batch[0].outputs[0].text == alone.text


def test_n_completions_use_their_own_seeds() -> None:
    llm = make_llm(3)
    params = SamplingParams(n=3, temperature=1.0, seed=7, max_tokens=16)
    out = llm.generate(PROMPTS[0], params, use_tqdm=False)[0]
    assert [o.index for o in out.outputs] == [0, 1, 2]
    assert len({tuple(o.token_ids) for o in out.outputs}) == 3
    again = llm.generate(PROMPTS[0], params, use_tqdm=False)[0]
    assert [o.token_ids for o in again.outputs] == [o.token_ids for o in out.outputs]


def test_preempted_sequences_are_recomputed_with_the_same_output(
    reference: list[list[int]],
) -> None:
    # Room for about two sequences: the others wait or get preempted.
    llm = make_llm(3, num_kv_blocks=12, block_size=8, max_model_len=96)
    assert greedy_ids(llm, PROMPTS) == reference
    assert_all_blocks_free(llm)


def test_stop_conditions(reference: list[list[int]], target_only: LLM) -> None:
    tokenizer = target_only.get_tokenizer()
    full = reference[0]
    out = target_only.generate(
        PROMPTS[0], SamplingParams(temperature=0, max_tokens=5), use_tqdm=False
    )[0].outputs[0]
    assert out.token_ids == full[:5] and out.finish_reason == "length"

    stop_token = full[10]
    out = target_only.generate(
        PROMPTS[0],
        SamplingParams(temperature=0, max_tokens=32, stop_token_ids=[stop_token]),
        use_tqdm=False,
    )[0].outputs[0]
    cut = full.index(stop_token) + 1
    assert out.token_ids == full[:cut] and out.finish_reason == "stop"
    assert out.stop_reason == stop_token

    text = tokenizer.decode(full, skip_special_tokens=True)
    stop = text[20:26]
    out = target_only.generate(
        PROMPTS[0], SamplingParams(temperature=0, max_tokens=32, stop=stop), use_tqdm=False
    )[0].outputs[0]
    assert out.text == text[: text.index(stop)] and out.finish_reason == "stop"
    assert out.stop_reason == stop


def test_every_block_is_free_after_generate(target_only: LLM) -> None:
    greedy_ids(target_only, PROMPTS)
    assert_all_blocks_free(target_only)


def pad_vocabulary(source: str, folder: Path, extra_rows: int) -> Path:
    """A copy of a bundled model whose (tied) embedding table has extra zero rows."""
    shutil.copytree(specserve.resolve_model(source), folder)
    config = json.loads((folder / "config.json").read_text())
    config["vocab_size"] += extra_rows
    (folder / "config.json").write_text(json.dumps(config))
    for path in folder.glob("*.safetensors"):
        tensors = load_file(path)
        if "model.embed_tokens.weight" in tensors:
            table = tensors["model.embed_tokens.weight"]
            pad = torch.zeros(extra_rows, table.shape[1], dtype=table.dtype)
            tensors["model.embed_tokens.weight"] = torch.cat([table, pad])
        save_file(tensors, path, metadata={"format": "pt"})
    return folder


def test_a_draft_with_a_larger_padded_vocabulary_works(
    tmp_path: Path, reference: list[list[int]]
) -> None:
    draft = pad_vocabulary("specserve/demo-draft", tmp_path / "padded-draft", 64)
    llm = make_llm(3, draft=str(draft))
    assert greedy_ids(llm, PROMPTS) == reference


def test_a_target_with_a_larger_padded_vocabulary_works(tmp_path: Path) -> None:
    target = pad_vocabulary("specserve/demo-target", tmp_path / "padded-target", 64)
    plain = LLM(str(target), dtype="float32", max_model_len=512)
    spec = LLM(
        str(target),
        dtype="float32",
        max_model_len=512,
        speculative_config={"model": "specserve/demo-draft", "num_speculative_tokens": 3},
    )
    assert greedy_ids(spec, PROMPTS[:4]) == greedy_ids(plain, PROMPTS[:4])


def test_overlapped_micro_batches_give_the_same_greedy_output(reference: list[list[int]]) -> None:
    llm = make_llm(3, overlap=True)
    assert greedy_ids(llm, PROMPTS) == reference
    assert llm.speculation_stats()["acceptance_rate"] > 0.2
    assert_all_blocks_free(llm)
    llm.engine.drafter.close()


def test_workers_that_lose_sequences_get_them_back_from_the_router(
    reference: list[list[int]],
) -> None:
    # As if both workers restarted mid-generation: they answer NOT_FOUND, and
    # the router re-prefills the sequences from the tokens it holds.
    llm = make_llm(3)
    engine = llm.engine
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS)
    states = [
        engine.add_request(str(i), engine.tokenizer.encode(p), params)[0]
        for i, p in enumerate(PROMPTS)
    ]
    for _ in range(3):
        engine.step()
    ids = [s.seq_id for s in states]
    assert engine.workers.target.release(ids) > 0 and engine.workers.draft.release(ids) > 0
    while engine.has_unfinished():
        engine.step()
    assert [s.output_ids for s in states] == reference
    assert_all_blocks_free(llm)
