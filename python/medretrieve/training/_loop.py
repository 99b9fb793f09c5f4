"""What the encoder fits share: argument checks, the training questions' relevant chunks, the check that a base
model reproduces the collection's encoder, pooling as the exported encoder pools, AdamW with warm-up and decay, and
the ONNX export.

Torch and transformers are needed only here, at fit time (``pip install "medretrieve[export]"``); what a fit
produces is an ordinary ONNX model that runs with onnxruntime like every other encoder.
"""
from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

INFO_NAME = "adaptation.json"  # what a fit did, written beside the exported model
MIN_AGREEMENT = 0.95  # mean cosine a base model must reach against the collection's own encoder


def check_args(epochs: Any, lr: Any, batch_size: Any, temperature: Any) -> None:
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    for name, v in (("lr", lr), ("temperature", temperature)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a positive number, got {v!r}")


def train(model: Any, items: List[Any], loss_of: Callable[[List[Any]], Any], *, epochs: int, batch_size: int, lr: float, rng: random.Random,
          desc: str, progress: bool) -> Tuple[List[float], float]:
    """Fine-tune ``model`` on ``items`` in shuffled batches: ``loss_of(batch)`` gives the batch's mean loss. AdamW
    with linear warm-up over 10% of the steps then linear decay to 0, gradients clipped at norm 1. Returns (mean
    loss of each epoch, wall time in s)."""
    import torch
    from tqdm import tqdm

    steps = epochs * math.ceil(len(items) / batch_size)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1.0, 0.1 * steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * max(0.0, 1 - s / steps))
    order = list(range(len(items)))
    losses: List[float] = []
    t0 = time.perf_counter()
    model.train()
    bar = tqdm(total=steps, desc=desc, disable=not progress)
    for _ in range(epochs):
        rng.shuffle(order)
        total = 0.0
        for i in range(0, len(order), batch_size):
            batch = [items[j] for j in order[i:i + batch_size]]
            loss = loss_of(batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            total += float(loss.detach()) * len(batch)
            bar.update(1)
        losses.append(total / len(order))
    bar.close()
    return losses, time.perf_counter() - t0


def export_trained(model: Any, tokenizer: Any, out: Path, kind: str, source: str, weights_dir: Optional[Path] = None,
                   **export_args: Any) -> None:
    """Save the fine-tuned model next to ``out`` and export it there as ONNX (``models.export.export_onnx``);
    the manifest's ``source`` says what it was fitted from (``source``), not the temporary folder it was saved
    to. ``weights_dir``: also keep the saved Hugging Face weights and tokenizer there."""
    import dataclasses

    from ..models.encoders import read_manifest, write_manifest
    from ..models.export import export_onnx

    model.eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".adapt-", dir=out.parent))
    try:
        model.save_pretrained(work)
        tokenizer.save_pretrained(work)
        export_onnx(work, out, kind, **export_args)
        write_manifest(out, dataclasses.replace(read_manifest(out), source=source))
        if weights_dir is not None:
            shutil.copytree(work, weights_dir, dirs_exist_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pooled_embedder(model: Any, tokenizer: Any, manifest: Any) -> Callable[[List[str]], Any]:
    """``texts -> vectors`` (a torch tensor, with gradients) computed as the exported encoder will: the
    manifest's pooling ([CLS] or masked mean), normalisation and maximum length."""
    import torch

    def embed(texts: List[str]) -> Any:
        enc = tokenizer(texts, truncation=True, max_length=manifest.max_length, padding=True, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        if manifest.pooling == "cls":
            vec = hidden[:, 0]
        else:
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(vec, dim=-1) if manifest.normalize else vec

    return embed


def base_agreement(embed: Callable[[List[str]], Any], model: Any, encoder: Any, probe: List[str], base_dir: Path,
                   what: str) -> float:
    """Mean cosine between ``base_dir``'s vectors (``embed``) and ``encoder``'s (the collection's ONNX model) on
    ``probe``. ValueError when the widths differ or it is under MIN_AGREEMENT: fine-tuning an unrelated model
    against the collection's vectors would start from noise."""
    import numpy as np
    import torch

    model.eval()
    with torch.no_grad():
        mine = embed(probe).numpy().astype(np.float64)
    ref = np.asarray(encoder.encode(probe), dtype=np.float64)
    if mine.shape != ref.shape:
        raise ValueError(f"{base_dir} gives {mine.shape[1]}-dim vectors, {what} {ref.shape[1]}-dim")
    cos = (mine * ref).sum(1) / np.maximum(np.linalg.norm(mine, axis=1) * np.linalg.norm(ref, axis=1), 1e-12)
    agreement = float(cos.mean())
    if agreement < MIN_AGREEMENT:
        raise ValueError(f"{base_dir} does not reproduce {what} (mean cosine {agreement:.3f} < {MIN_AGREEMENT}); "
                         "pass the model the collection was built with")
    return agreement


def question_positives(collection: Any, examples: Any) -> Tuple[List[Any], Any, List[str], List[Any]]:
    """The training questions of ``examples`` (as ``retrieval.expansion.training_pairs`` reads them) that have a
    live chunk of a relevant document in ``collection``: (every pair, the live rows, those questions, per question
    the positions in the live rows of its relevant chunks). ValueError when the collection is empty or no
    question has a relevant chunk."""
    import numpy as np

    from ..retrieval.expansion import training_pairs

    pairs = training_pairs(examples)
    live = np.flatnonzero(collection.alive)
    if len(live) == 0:
        raise ValueError("the collection has no live chunks to adapt to")
    position = {int(r): i for i, r in enumerate(live)}
    questions: List[str] = []
    positives: List[Any] = []
    for question, docs in pairs:
        rows = [position[r] for d in sorted(docs) for r in collection.document_rows(d)]
        if question.strip() and rows:
            questions.append(question)
            positives.append(np.asarray(rows, dtype=np.int64))
    if not questions:
        raise ValueError(f"none of the {len(pairs)} training questions has a relevant document in the collection")
    return pairs, live, questions, positives


def write_info(out: Path, result: Any) -> None:
    """Record what a fit did (a dataclass) as ``out/adaptation.json``."""
    (out / INFO_NAME).write_text(json.dumps(asdict(result), indent=2), encoding="utf-8")


def require_model_dir(base: Any) -> Path:
    """``base`` as a local Hugging Face model directory (FileNotFoundError when it has no config.json)."""
    base_dir = Path(base).expanduser()
    if not (base_dir / "config.json").is_file():
        raise FileNotFoundError(f"{base_dir} is not a Hugging Face model directory (no config.json)")
    return base_dir
