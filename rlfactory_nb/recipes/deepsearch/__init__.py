"""DeepSearch: answer open-domain questions (NQ, HotpotQA) by calling a search tool, rewarded by
exact match. The original RLFactory's flagship task, following Search-R1 (Jin et al. 2025).

- `prompt`: the system prompt (search with the tool, answer inside `<answer>` tags);
- `data`: questions in the verl / Search-R1 parquet layout or plain JSONL, and conversion between them;
- `reward`: NQ-style exact match of the `<answer>` text, plus the training reward with a format term;
- `convert`: `python -m rlfactory_nb.recipes.deepsearch.convert IN OUT`;
- `remote_search`: an MCP `search` server in front of a Search-R1 retrieval service (e5 + faiss over
  wiki-18), for corpora too large for the in-memory BM25 server.

The runnable example is `examples/deepsearch/` (config, tools, a small synthetic corpus and questions).
"""

from rlfactory_nb.recipes.deepsearch.data import (
    Question,
    read_questions,
    write_questions,
)
from rlfactory_nb.recipes.deepsearch.prompt import SYSTEM_PROMPT, prompt_messages, question_from_messages
from rlfactory_nb.recipes.deepsearch.reward import (
    answer_exact_match,
    answer_format,
    extract_answer,
    training_reward,
)

__all__ = [
    "SYSTEM_PROMPT",
    "Question",
    "answer_exact_match",
    "answer_format",
    "extract_answer",
    "prompt_messages",
    "question_from_messages",
    "read_questions",
    "training_reward",
    "write_questions",
]
