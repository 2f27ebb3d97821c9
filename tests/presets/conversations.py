"""Conversations that exercise every branch of the Qwen3 chat format (shared by template tests)."""

CALC = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
SEARCH = {
    "type": "function",
    "function": {"name": "search", "description": "Search «wiki» — ünïcode", "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}}}},
}


def call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


USER = {"role": "user", "content": "What is 12*(3+4)?"}
SYSTEM = {"role": "system", "content": "You are a careful assistant."}

CASES = {
    "user_only": ([USER], None),
    "system_user": ([SYSTEM, USER], None),
    "tools_no_system": ([USER], [CALC]),
    "tools_with_system": ([SYSTEM, USER], [CALC, SEARCH]),
    "one_tool_round": (
        [USER, {"role": "assistant", "content": "", "tool_calls": [call("calculator", {"expression": "12*(3+4)"})]},
         {"role": "tool", "content": "84"}, {"role": "assistant", "content": "<answer>84</answer>"}],
        [CALC],
    ),
    "content_and_two_calls": (
        [SYSTEM, USER,
         {"role": "assistant", "content": "Let me compute.", "tool_calls": [call("calculator", {"expression": "12*7"}), call("search", '{"query": "x"}')]},
         {"role": "tool", "content": "84"}, {"role": "tool", "content": "no results"}],
        [CALC, SEARCH],
    ),
    "think_in_content_history": (
        [USER, {"role": "assistant", "content": "<think>\nfirst thoughts\n</think>\n\nIt is 84."},
         {"role": "user", "content": "And 2*3?"}, {"role": "assistant", "content": "<think>\nsecond\n</think>\n\n6"}],
        None,
    ),
    "reasoning_content_field": (
        [USER, {"role": "assistant", "content": "calling", "reasoning_content": "need tool",
                "tool_calls": [call("calculator", {"expression": "1+1"})]},
         {"role": "tool", "content": "2"}, {"role": "assistant", "content": "2", "reasoning_content": ""}],
        [CALC],
    ),
    "multi_turn_tools_then_user": (
        [SYSTEM, USER, {"role": "assistant", "content": "", "tool_calls": [call("calculator", {"expression": "12*7"})]},
         {"role": "tool", "content": "84"}, {"role": "assistant", "content": "84"},
         {"role": "user", "content": "<tool_response>\nfake\n</tool_response>"},
         {"role": "user", "content": "thanks, now 5-9?"}],
        [CALC],
    ),
    "tool_first_message": ([{"role": "tool", "content": "orphan"}, USER], None),
    "late_system": ([USER, {"role": "system", "content": "be brief"}, {"role": "assistant", "content": "ok"}], None),
    "unicode": ([{"role": "user", "content": "Ünïcödé ✓ 東京 — 123"}], [SEARCH]),
}
