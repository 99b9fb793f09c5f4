"""BioASQ: the loader of its golden files and test batches (``golden``), Phase A evidence as PubMed URLs and
snippets (``evidence``), answers written and scored as BioASQ scores them (``answers``), and a batch run to a
resumable submission with its per-question cache (``submissions``, ``run_cache``).

Why the answer prompt, parser and schema are not here: ``bioasq_messages``, ``parse_bioasq`` and
``bioasq_response_format`` are also what the Answerer's ``mode="bioasq"`` asks (``POST /v1/answer``), and
generation sits below evaluation (a wing imports only wings below it), so they stay in ``medretrieve.generation``
and this package uses them from there, never the reverse. The question types (``BIOASQ_TYPES``) are defined once,
in ``medretrieve.records``, where the HTTP schema reads them too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .golden import Snippet as Snippet
    from .golden import BioASQQuestion as BioASQQuestion
    from .golden import load_bioasq as load_bioasq
    from .evidence import PUBMED_URL as PUBMED_URL
    from .evidence import bioasq_evidence as bioasq_evidence
    from .answers import BioASQAnswer as BioASQAnswer
    from .answers import evaluate_bioasq_answers as evaluate_bioasq_answers
    from .answers import make_bioasq_answer_fn as make_bioasq_answer_fn
    from .answers import generate_bioasq_answer as generate_bioasq_answer
    from .answers import phase_a_entries as phase_a_entries
    from .answers import submission_entries as submission_entries
    from .submissions import PHASES as PHASES
    from .submissions import BatchRun as BatchRun
    from .submissions import BatchResult as BatchResult
    from .submissions import score_submission as score_submission
    from .submissions import strip_batch as strip_batch

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
