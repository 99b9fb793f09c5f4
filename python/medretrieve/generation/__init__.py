"""Generation: LLM backends (``llm``), prompts and templates (``prompts``), reply parsers (``parsers``), citation
checks (``citations``), grounded answers with abstention (``generate``), LLM expansion terms (``terms``)."""
