"""A shared-data folder in miniature, for tests of what reads ``../shared/data`` (imported by
module name, like ``ngram_testlib``): each pretraining corpus, Shakespeare and a distillation
prompt file of every kind ``heads prompts`` mixes."""

from __future__ import annotations

import json
from pathlib import Path

PARA = ("The {w} of the {x} is a long paragraph about {w} that goes on for a while so that it "
        "is long enough to be a passage, with more words about {x} and {w} to read, and then a "
        "second sentence that makes it longer still.")


def mini_shared_data(root: Path) -> Path:
    """Write the miniature shared data under ``root`` and return it."""
    for rel, word in (("corpus/openstax/a.txt", "cell"), ("corpus/more/python-docs/d.txt", "list"),
                      ("corpus/more/python-peps/p.txt", "import")):
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"Topic {word.title()} {i}" for i in range(5)]
        lines += [PARA.format(w=word, x=f"thing{i}") for i in range(30)]
        f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    shake = root / "corpus/tinyshakespeare/input.txt"
    shake.parent.mkdir(parents=True)
    shake.write_text("\n".join(f"ROMEO:\nWhat light through yonder window {i} breaks, it is "
                               "the east and Juliet is the sun." for i in range(40)) + "\n")
    prompts = root / "prompts/distill_prompts.part00.jsonl"
    prompts.parent.mkdir(parents=True)
    rows = ([{"source": "gsm8k-train", "prompt": f"If I have {i} apples?"} for i in range(20)]
            + [{"source": "t0:x", "prompt": f"Template {i}"} for i in range(20)]
            + [{"source": "self-instruct-user", "prompt": f"Write a poem {i}"}
               for i in range(20)])
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root
