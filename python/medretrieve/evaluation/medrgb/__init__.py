"""MedRGB (Ngo et al., 2024): multiple-choice medical questions answered over retrieved context in four scenarios
(standard, sufficiency, integration, robustness), and everything only this evaluation uses: its prompts and their
templates (``prompts``, ``templates/``), reply parsers (``parsers``), reply schemas (``schemas``) and the run
(``run``: contexts of signal and noise documents, counterfactuals, sub-questions, scoring, the resumable cache).

Why here and not in ``generation``: the Answerer never asks a multiple-choice question, so nothing below the
evaluation wing needs these; they reuse generation's template loader, evidence numbering and reply-reading helpers
(``generation.prompts.render_messages``, ``generation.parsers.find_json`` ...), never the reverse. ``SCENARIOS`` is
defined once, in ``prompts``; the abstention phrase is ``medretrieve.records.INSUFFICIENT``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .prompts import SCENARIOS as SCENARIOS
    from .prompts import option_letters as option_letters
    from .prompts import medrgb_messages as medrgb_messages
    from .prompts import search_topics_messages as search_topics_messages
    from .prompts import sub_qa_messages as sub_qa_messages
    from .prompts import counterfactual_messages as counterfactual_messages
    from .prompts import judge_messages as judge_messages
    from .parsers import parse_medrgb as parse_medrgb
    from .parsers import parse_choice as parse_choice
    from .parsers import parse_sub_qa as parse_sub_qa
    from .parsers import parse_counterfactual as parse_counterfactual
    from .parsers import parse_judge as parse_judge
    from .schemas import medrgb_response_format as medrgb_response_format
    from .run import N_VALUES as N_VALUES
    from .run import P_VALUES as P_VALUES
    from .run import STANDARD_N as STANDARD_N
    from .run import ContextDoc as ContextDoc
    from .run import Setting as Setting
    from .run import make_settings as make_settings
    from .run import n_signal as n_signal
    from .run import compose_context as compose_context
    from .run import compose_robustness_context as compose_robustness_context
    from .run import robustness_swaps as robustness_swaps
    from .run import score_setting as score_setting
    from .run import JsonlCache as JsonlCache
    from .run import MedRGBRun as MedRGBRun
    from .run import MedRGBRunner as MedRGBRunner

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
