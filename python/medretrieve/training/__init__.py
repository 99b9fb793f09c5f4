"""Training from questions with known relevant documents: the learned ranker (``ranker_fitting``), the query encoder
(``query_encoder``), both towers of a symmetric encoder (``encoder``) and a cross-encoder (``cross_encoder``).
Torch is needed for the encoders, at fit time only."""
