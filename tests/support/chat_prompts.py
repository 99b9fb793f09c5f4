"""What every chat prompt the package builds must be, whoever builds it (generation's prompts, MedRGB's)."""
from __future__ import annotations

import re
from typing import Dict, List

UNFILLED = re.compile(r"\$[a-z_]+")  # a string.Template placeholder left in the text


def assert_filled_chat(messages: List[Dict[str, str]]) -> None:
    """``messages`` is a system and a user message, neither empty, with no ``$placeholder`` left unfilled."""
    assert [m["role"] for m in messages] == ["system", "user"]
    for m in messages:
        assert m["content"].strip()
        assert not UNFILLED.search(m["content"]), m["content"]
