"""Training questions over the demo corpus (``assets/demo_corpus.jsonl``) that several test files fit rankers on."""

TRAINING = [
    ("What is the first-line drug for type 2 diabetes?", ["demo-002"]),
    ("Which drug lowers blood glucose in type 2 diabetes?", ["demo-002"]),
    ("How is atrial fibrillation treated?", ["demo-006"]),
    ("What prevents stroke in atrial fibrillation?", ["demo-006"]),
    ("What causes asthma attacks?", ["demo-007"]),
    ("Which inhalers treat asthma?", ["demo-007"]),
]
