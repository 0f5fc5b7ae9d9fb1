"""Model-native tool calls: the Hermes / Qwen ``<tool_call>`` format, tools declared to the chat template,
and tool results as the template's own ``tool`` messages.

    text = render_with_tools(tok, [{"role": "user", "content": "..."}], schemas)   # the prompt the model sees
    content, calls = tool_calls_of(turn_text)                      # OpenAI-shaped tool_calls, or []
    ids = messages_ids(tok, [{"role": "tool", "content": "7"}], ended=True)   # what follows the turn, as ids

The same parser serves the policy endpoint (:mod:`rewardlab.rollout.endpoint`) and the trainer's episodes
(:mod:`rewardlab.rollout.episodes`), so a model trained here calls tools the way vLLM's ``hermes`` parser
reads them at serving time.

**Declaring tools.** A chat template that renders ``tools=`` (Qwen2.5 / Qwen3, Hermes, Llama 3.1 ...) gets
them through the template. One that ignores them (it renders the same text with and without tools: the
tiny test model's, SmolLM2's) gets the Hermes system block instead, ``<tools>`` with one JSON schema per
line and the call format, prepended to the system message, so a model is never asked to call tools it was
not shown.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from rewardlab.errors import RewardlabError

OPEN, CLOSE = "<tool_call>", "</tool_call>"

HERMES_SYSTEM = (
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> "
    "XML tags:\n<tool_call>\n{{\"name\": <function-name>, \"arguments\": <args-json-object>}}\n</tool_call>"
)
"""The tools block for a chat template that does not render ``tools=`` (the Hermes / Qwen wording)."""


def tool_calls_of(text: str) -> tuple[str | None, list[dict]]:
    """Tool calls in the model's own format, Hermes / Qwen ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``
    (what vLLM's ``hermes`` parser reads): ``(content before the first call or None, OpenAI tool_calls)``. A block
    that is not a JSON object with a string ``name`` is no call: then the whole text is content and no call is
    returned (as vLLM does). Linear time: one forward scan."""
    calls, pos = [], text.find(OPEN)
    content = text if pos < 0 else text[:pos]
    while pos >= 0:
        end = text.find(CLOSE, pos)
        if end < 0:
            return text, []
        try:
            call = json.loads(text[pos + len(OPEN):end])
        except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
            return text, []
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return text, []
        args = call.get("arguments", {})
        args = args if isinstance(args, str) else json.dumps(args)
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": call["name"], "arguments": args}})
        pos = text.find(OPEN, end)
    return (content.strip() or None) if calls else text, calls


_RENDERS: dict[str, bool] = {}


def renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders ``tools=`` (it changes the text when tools are given); probed
    once per template (every prompt of a run is rendered through it)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return False
    if str(template) not in _RENDERS:
        _RENDERS[str(template)] = _probe(tokenizer)
    return _RENDERS[str(template)]


def _probe(tokenizer: Any) -> bool:
    msgs = [{"role": "user", "content": "q"}]
    probe = [{"type": "function", "function": {"name": "rewardlab_probe", "description": "p",
                                               "parameters": {"type": "object", "properties": {}}}}]
    try:
        with_tools = tokenizer.apply_chat_template(msgs, tools=probe, tokenize=False, add_generation_prompt=True)
    except Exception:  # noqa: BLE001 - a template that refuses tools= does not render them
        return False
    return with_tools != tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def with_tools_declared(messages: list[dict], schemas: list[dict]) -> list[dict]:
    """``messages`` with the Hermes tools block at the start of the system message (one is added when there is
    none): for a chat template that does not render ``tools=`` itself."""
    block = HERMES_SYSTEM.format(tools="\n".join(json.dumps(s) for s in schemas))
    msgs = [dict(m) for m in messages]
    if msgs and msgs[0].get("role") == "system":
        msgs[0]["content"] = f"{msgs[0].get('content') or ''}\n\n{block}".lstrip()
        return msgs
    return [{"role": "system", "content": block}, *msgs]


def render_with_tools(tokenizer: Any, messages: list[dict], schemas: list[dict]) -> str:
    """The prompt text of chat ``messages`` with ``schemas`` declared: through the template when it renders
    tools, else in the system message (:func:`with_tools_declared`); the assistant turn opened."""
    if not schemas:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    if renders_tools(tokenizer):
        return tokenizer.apply_chat_template(messages, tools=schemas, tokenize=False, add_generation_prompt=True)
    return tokenizer.apply_chat_template(with_tools_declared(messages, schemas), tokenize=False,
                                         add_generation_prompt=True)


_SENTINEL = "\u2063rewardlab-answer\u2063"


def messages_ids(tokenizer: Any, messages: list[dict], *, ended: bool) -> list[int]:
    """The token ids that follow an assistant turn when ``messages`` (``user`` feedback, ``tool`` results) come
    next and the assistant goes on: what the chat template puts between them (end of turn, each message with its
    role's header, the assistant header), encoded alone, never re-encoding the sampled turn. Several ``tool``
    messages render together, as the template groups them. ``ended``: the assistant turn already ends with the
    end-of-turn token the model sampled (it is not inserted twice)."""
    if not messages:
        raise RewardlabError("messages_ids needs at least one message")
    if getattr(tokenizer, "chat_template", None):
        msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _SENTINEL}, *messages]
        full = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        after = full.split(_SENTINEL, 1)[1]
    else:
        after = "".join(f"\n\n{'Feedback' if m['role'] == 'user' else m['role'].capitalize()}: {m['content']}"
                        for m in messages) + "\n\n"
    eos = tokenizer.eos_token
    if ended and eos and after.startswith(eos):
        after = after[len(eos):]
    return tokenizer.encode(after, add_special_tokens=False)


__all__ = ["render_with_tools", "tool_calls_of"]
