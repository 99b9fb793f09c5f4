"""Cross-encoder fine-tuning (:func:`fit_cross_encoder`) learns what neither vector nor term statistics see, the
question and the passage read together, on the candidates the retriever itself returns; see its docstring
for the method and bench/RESULTS.md for what it adds to a learned ranker.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import List, Optional, Union

from ..models.encoders import join_title
from ..models.export import check_output_dir
from ..retrieval.expansion import training_pairs
from ._loop import check_args, export_trained, require_model_dir, train, write_info


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
    model directory; a bi-encoder (e.g. all-MiniLM-L6-v2) gets a new one-logit head. With a learned ranker its
    logits add to the ranker's (``ranker_ce_weight``). On 2 CPU cores an int8 export (``quantize="int8"``) scores
    ~35 candidates within a 300 ms deadline (fp32: ~10). Fitted on one BioASQ year it gained +0.004..+0.011
    document MAP@10 on held-out questions of that year but nothing on another year (bench/RESULTS.md), so fit it
    on questions like the ones it will serve. Needs torch and transformers (fit time only).
    Raises ValueError for bad settings or no usable question, FileExistsError when ``out_dir`` is not empty
    and ``overwrite`` is False (checked before training).
    """
    check_args(epochs, lr, 1, 1.0)
    for name, v, lo in (("group_size", group_size, 2), ("max_positives", max_positives, 1),
                        ("max_length", max_length, 16)):
        if not isinstance(v, int) or isinstance(v, bool) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    out = check_output_dir(out_dir, overwrite)
    base_dir = require_model_dir(base)
    pairs = training_pairs(examples)
    rng = random.Random(seed)
    groups: List[tuple] = []
    used = 0
    from tqdm import tqdm

    for question, docs in tqdm(pairs, desc="cross-encoder candidates", disable=not progress):
        if not question.strip():
            continue
        hits = retriever.search(question, k=100, deadline_ms=None, mmr=False, recovery=False).hits
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

    losses, seconds = train(model, groups, loss_of, epochs=epochs, batch_size=1, lr=lr, rng=rng,
                             desc="fit cross-encoder", progress=progress)
    export_trained(model, tokenizer, out, "cross", f"{base_dir} fine-tuned by medretrieve fit-cross-encoder",
                   quantize=quantize, max_length=max_length, overwrite=overwrite)
    result = CrossEncoderFit(str(out), str(base_dir), used, len(pairs) - used, len(groups), epochs, float(lr),
                             group_size, losses, seconds)
    write_info(out, result)
    return result
