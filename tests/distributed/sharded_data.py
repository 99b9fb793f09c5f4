"""The small corpus and questions of the distributed tests."""
from __future__ import annotations

from typing import Dict, List

TOPICS = ["metformin lowers glucose in type 2 diabetes", "allopurinol lowers serum urate in gout",
          "inhaled corticosteroids reduce asthma exacerbations", "triptans treat acute migraine attacks",
          "statins lower LDL cholesterol and cardiovascular risk", "IL-6 drives the acute phase response",
          "aspirin inhibits platelet aggregation", "BRCA1 mutations raise breast cancer risk"]
QUESTIONS = ["What lowers glucose in type 2 diabetes?", "Which drugs treat gout?", "Is aspirin an antiplatelet drug?",
             "List treatments of asthma exacerbations", "BRCA1 and breast cancer risk", "What does IL-6 drive?",
             "How are migraine attacks treated?"]


def corpus_records() -> List[Dict]:
    """60 documents of two sections, each mixing three of the topics (so BM25 and dense rank them apart)."""
    return [{"id": f"d{i}", "title": f"Note {i} on {TOPICS[i % 8].split()[0]}",
             "sections": [{"title": "Treatment", "text": f"{TOPICS[i % 8]} in patient group {i}; {TOPICS[(i * 3) % 8]}."},
                          {"title": "Background",
                           "text": f"Study {i}: {TOPICS[(i + 1) % 8]} and {TOPICS[(i + 5) % 8]} were compared."}]}
            for i in range(60)]
