"""Train the bundled demo pair: a Qwen3 target and a ~10x cheaper Qwen3 draft
sharing one byte-level BPE tokenizer, on the Python standard library's source.

    python training/train_demo_pair.py prepare --data .train_data     # CPU, a minute
    python training/train_demo_pair.py train --data .train_data --out .train_out  # a GPU, minutes

``prepare`` collects the corpus (every .py file of this Python's standard
library, sorted by path; by a hash of its path, one file in ten is held out for
evaluation and another one in ten is kept for validation), trains the
tokenizer on the training files and writes the token streams. ``train`` trains
both models with fixed seeds and step counts, keeping the weights with the
lowest validation loss, saves them as Hugging Face checkpoints in float16, and
evaluates them on the held-out files (perplexity; acceptance rate of draft
against target).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers import Qwen3Config

VOCAB_SIZE = 4096
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SEQ_LEN = 256

# Target ~14M parameters; draft ~1.3M, about a tenth of the target's compute per token.
SHAPES = {
    "target": dict(
        hidden_size=384,
        intermediate_size=1024,
        num_hidden_layers=8,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=64,
    ),
    "draft": dict(
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
    ),
}
TRAINING = {
    "target": dict(steps=3000, batch=128, lr=2e-3, seed=1),
    "draft": dict(steps=3000, batch=128, lr=3e-3, seed=2),
}


# ---------------------------------------------------------------- prepare (CPU)


def corpus_files() -> dict[str, list[Path]]:
    """The standard library's .py files split into train, valid and heldout."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    split: dict[str, list[Path]] = {"train": [], "valid": [], "heldout": []}
    for p in files:
        bucket = hashlib.sha256(str(p.relative_to(root)).encode()).digest()[0] % 10
        split["heldout" if bucket == 0 else "valid" if bucket == 1 else "train"].append(p)
    return split


def read(files: list[Path]) -> list[str]:
    return [p.read_text(encoding="utf-8", errors="replace") for p in files]


def prepare(data: Path) -> None:
    from model_runtime.bpe import train_tokenizer

    files = corpus_files()
    texts = {name: read(paths) for name, paths in files.items()}
    fast = train_tokenizer(VOCAB_SIZE, texts["train"], SPECIAL_TOKENS[1:])
    fast.chat_template = CHAT_TEMPLATE
    data.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(data / "tokenizer")
    eos = fast.eos_token_id
    for name, split_texts in texts.items():
        ids: list[int] = []
        for enc in fast.backend_tokenizer.encode_batch(split_texts):
            ids.extend(enc.ids)
            ids.append(eos)
        np.save(data / f"{name}.npy", np.array(ids, dtype=np.uint16))
        print(f"{name}: {len(split_texts)} files, {len(ids)} tokens")
    counts = {f"{name}_files": len(paths) for name, paths in files.items()}
    corpus = {"python": sysconfig.get_python_version(), **counts}
    (data / "corpus.json").write_text(json.dumps(corpus))


# ------------------------------------------------------------------ train (GPU)


def qwen3_config(role: str, eos: int) -> Qwen3Config:
    return Qwen3Config(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        eos_token_id=eos,
        bos_token_id=eos,
        pad_token_id=eos,
        rope_theta=10000.0,
        **SHAPES[role],
    )


def batches(tokens: torch.Tensor, batch: int, steps: int, seed: int) -> Iterator[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(tokens) - SEQ_LEN - 1, (batch,), generator=gen)
        yield torch.stack([tokens[s : s + SEQ_LEN + 1] for s in starts.tolist()])


@torch.no_grad()
def mean_loss(model: nn.Module, tokens: torch.Tensor, device: str, max_rows: int = 256) -> float:
    n = min(max_rows, (len(tokens) - 1) // SEQ_LEN)
    rows = torch.stack([tokens[j * SEQ_LEN : j * SEQ_LEN + SEQ_LEN + 1] for j in range(n)])
    total = 0.0
    for chunk in rows.to(device).split(64):
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
            logits = model(chunk[:, :-1]).logits
        total += torch.nn.functional.cross_entropy(
            logits.float().flatten(0, 1), chunk[:, 1:].flatten(), reduction="sum"
        ).item()
    return total / (n * SEQ_LEN)


def train_one(
    role: str, tokens: torch.Tensor, valid: torch.Tensor, eos: int, device: str
) -> tuple[nn.Module, int, float, int]:
    from transformers import AutoModelForCausalLM

    cfg = TRAINING[role]
    torch.manual_seed(cfg["seed"])
    model = AutoModelForCausalLM.from_config(qwen3_config(role, eos), dtype=torch.float32)
    model = model.to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"{role}: {params / 1e6:.2f}M parameters", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.1, betas=(0.9, 0.95))
    warmup = 100
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: (
            min(1.0, (s + 1) / warmup)
            * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, s / cfg["steps"]))))
        ),
    )
    start = time.time()
    best = (float("inf"), -1, None)
    for step, batch in enumerate(batches(tokens, cfg["batch"], cfg["steps"], cfg["seed"])):
        batch = batch.to(device, non_blocking=True).long()
        with torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16):
            logits = model(batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(
            logits.float().flatten(0, 1), batch[:, 1:].flatten()
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 200 == 0 or step == cfg["steps"] - 1:
            model.eval()
            val = mean_loss(model, valid, device)
            model.train()
            if val < best[0]:
                state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                best = (val, step + 1, state)
            print(
                f"{role} step {step + 1} loss {loss.item():.3f} valid {val:.3f} "
                f"{time.time() - start:.0f}s",
                flush=True,
            )
    model.load_state_dict(best[2])
    print(f"{role}: keeping step {best[1]} (valid loss {best[0]:.3f})", flush=True)
    return model.eval(), params, time.time() - start, best[1]


def processed(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Probabilities after temperature and nucleus truncation, [N, V]."""
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


@torch.no_grad()
def evaluate(target: nn.Module, draft: nn.Module, tokens: torch.Tensor, device: str) -> dict:
    n = (len(tokens) - 1) // SEQ_LEN
    seqs = tokens[: n * SEQ_LEN + 1]
    nll = {"target": 0.0, "draft": 0.0}
    count = 0
    greedy_agree = 0.0
    alpha = {"t1.0": 0.0, "t0.8_p0.95": 0.0}
    for i in range(0, n, 32):
        starts = range(i * SEQ_LEN, min(n, i + 32) * SEQ_LEN, SEQ_LEN)
        rows = torch.stack([seqs[s : s + SEQ_LEN + 1] for s in starts]).to(device).long()
        inputs, labels = rows[:, :-1], rows[:, 1:].flatten()
        p_logits = target(inputs).logits.float().flatten(0, 1)
        q_logits = draft(inputs).logits.float().flatten(0, 1)
        nll["target"] += torch.nn.functional.cross_entropy(p_logits, labels, reduction="sum").item()
        nll["draft"] += torch.nn.functional.cross_entropy(q_logits, labels, reduction="sum").item()
        count += labels.numel()
        greedy_agree += (p_logits.argmax(-1) == q_logits.argmax(-1)).sum().item()
        for key, (t, tp) in {"t1.0": (1.0, 1.0), "t0.8_p0.95": (0.8, 0.95)}.items():
            p, q = processed(p_logits, t, tp), processed(q_logits, t, tp)
            alpha[key] += torch.minimum(p, q).sum(-1).sum().item()
    rates = {"greedy": greedy_agree / count, **{k: v / count for k, v in alpha.items()}}
    expected = {
        k: {str(kk): (1 - a ** (kk + 1)) / (1 - a) for kk in range(1, 9)} for k, a in rates.items()
    }
    return {
        "heldout_tokens": count,
        "perplexity": {k: math.exp(v / count) for k, v in nll.items()},
        "acceptance_rate": rates,
        "chance_acceptance_rate_uniform": 1 / VOCAB_SIZE,
        "expected_tokens_per_round": expected,
    }


def train(data: Path, out: Path, device: str, steps: int | None) -> None:
    from transformers import AutoTokenizer, GenerationConfig

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    torch.use_deterministic_algorithms(True, warn_only=True)
    if steps is not None:  # a quick smoke run; the shipped pair uses TRAINING's counts
        for cfg in TRAINING.values():
            cfg["steps"] = steps
    tokenizer = AutoTokenizer.from_pretrained(data / "tokenizer")
    eos = tokenizer.eos_token_id
    train_tokens = torch.from_numpy(np.load(data / "train.npy").astype(np.int64))
    held_tokens = torch.from_numpy(np.load(data / "heldout.npy").astype(np.int64))
    valid_tokens = torch.from_numpy(np.load(data / "valid.npy").astype(np.int64))
    report: dict = {
        "corpus": json.loads((data / "corpus.json").read_text()),
        "train_tokens": len(train_tokens),
        "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "shapes": SHAPES,
        "training": TRAINING,
        "seq_len": SEQ_LEN,
    }
    models = {}
    for role in ("target", "draft"):
        model, params, seconds, kept = train_one(role, train_tokens, valid_tokens, eos, device)
        models[role] = model
        report[f"{role}_parameters"] = params
        report[f"{role}_train_seconds"] = seconds
        report[f"{role}_kept_step"] = kept
    report.update(evaluate(models["target"], models["draft"], held_tokens, device))
    generation = GenerationConfig(eos_token_id=eos, pad_token_id=eos, bos_token_id=eos)
    for role, model in models.items():
        folder = out / f"demo-{role}"
        model.generation_config = generation
        model.to(torch.float16).save_pretrained(folder, max_shard_size="12MB")
        tokenizer.save_pretrained(folder)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({k: report[k] for k in ("perplexity", "acceptance_rate")}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--data", type=Path, required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    t.add_argument("--steps", type=int, help="override the step counts (smoke runs only)")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.data)
    else:
        train(args.data, args.out, args.device, args.steps)


if __name__ == "__main__":
    main()
