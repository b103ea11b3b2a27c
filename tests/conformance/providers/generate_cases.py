"""Provider oracle cases (cases.json): the seed's and the reference's groq scripts, and scripts that exercise every host function, response field, error map and stream shape."""

import json
import sys

OUT = (
    sys.argv[1]
    if len(sys.argv) > 1
    else __import__("os").path.join(
        __import__("os").path.dirname(__import__("os").path.abspath(__file__)), "cases.json"
    )
)
BASE_REQ = {
    "system": [
        {"text": "You are terse.", "cache_hint": "Always", "region": "", "volatility": "rewritten"},
        {
            "text": "ctx",
            "cache_hint": {"SlidingPrefix": {"stable_fraction": 0.5}},
            "region": "brain",
            "volatility": "grows",
        },
    ],
    "messages": [
        {"role": "user", "content": "hi \u2713"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "c1", "name": "shell", "input": {"cmd": "ls", "n": 1.5}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a\nb", "is_error": False}],
            "cache_breakpoint": True,
        },
    ],
    "model": "m1",
    "max_tokens": 100,
    "temperature": 0.5,
    "tools": [
        {
            "name": "shell",
            "description": "run",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        }
    ],
    "extra": None,
    "request_timeout_secs": None,
}
CASES = []


def req(**over):
    r = json.loads(json.dumps(BASE_REQ))
    r.update(over)
    return r


def case(name, script, ops=("inference",), config=None, request=None, routes=None, **kw):
    c = {
        "name": name,
        "script": script,
        "ops": list(ops),
        "config": config or {"base_url": "${BASE}", "api_key": "k-123"},
        "request": request or req(),
        "routes": routes or {},
    }
    c.update(kw)
    CASES.append(c)


OPENAI_OK = {
    "choices": [{"message": {"content": "hello"}, "finish_reason": "stop"}],
    "usage": {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 4},
    },
}
OPENAI_TOOLS = {
    "choices": [
        {
            "message": {
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "shell", "arguments": '{"cmd":"ls -la","n":2}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 20, "completion_tokens": 9},
}


def jr(body, status=200, ctype="application/json", headers=None):
    return {
        "status": status,
        "content_type": ctype,
        "body": body if isinstance(body, str) else json.dumps(body),
        "headers": headers or {},
    }


SSE = (
    'data: {"choices":[{"delta":{"content":"Hel"},"finish_reason":null}]}\n\n'
    'data: {"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}\n\n'
    "data: [DONE]\n\n"
)
for label, script in (("seed", "@seed/groq.rhai"), ("ref", "@leviath/docs/examples/groq.rhai")):
    cc = "/chat/completions"
    case(f"{label}_groq_text", script, routes={cc: jr(OPENAI_OK)})
    case(f"{label}_groq_tools", script, routes={cc: jr(OPENAI_TOOLS)})
    case(
        f"{label}_groq_length",
        script,
        routes={cc: jr({"choices": [{"message": {"content": "cut"}, "finish_reason": "length"}]})},
    )
    case(f"{label}_groq_stream", script, ops=("stream",), routes={cc: jr(SSE, ctype="text/event-stream")})
    case(
        f"{label}_groq_models",
        script,
        ops=("list_models",),
        routes={"/models": jr({"data": [{"id": "llama-3.3-70b", "context_window": 131072}, {"id": "x"}]})},
    )
    case(
        f"{label}_groq_count",
        script,
        ops=("count_tokens",),
        count_text="hello world, count me",
        count_model="m1",
    )
    for st, body in (
        (429, "slow down"),
        (500, "boom"),
        (401, "bad key"),
        (402, "pay"),
        (403, "no"),
        (404, "missing"),
        (400, "max 500 tokens"),
        (400, "Your credit balance is too low"),
        (503, "overloaded"),
    ):
        case(
            f"{label}_groq_http_{st}_{body.split()[0].lower()}",
            script,
            routes={cc: jr({"error": body}, status=st)},
        )
    case(f"{label}_groq_png", script, routes={cc: jr("\x89PNG", ctype="image/png")})
    case(f"{label}_groq_no_key", script, config={"base_url": "${BASE}"})
    case(f"{label}_groq_temperature_07", script, request=req(temperature=0.7), routes={cc: jr(OPENAI_OK)})
    case(
        f"{label}_groq_extra",
        script,
        request=req(extra={"top_p": 0.9}, request_timeout_secs=30, system=[]),
        routes={cc: jr(OPENAI_OK)},
    )


# --- response normalisation through echo.rhai ------------------------------------------------------
def echo(name, response, **kw):
    case(f"echo_{name}", "echo.rhai", request=req(extra={"response": response}), **kw)


echo("plain", {"content": "x"})
echo("request_map_min", {"content": "x"}, request_override=True)
echo("content_int", {"content": 5})
echo("content_missing", {})
echo("not_map_string", "text")
echo("not_map_int", 5)
echo("not_map_array", [1])
echo("not_map_null", None)
for fr in [
    "ToolCall",
    "tool_calls",
    "tool_use",
    "TokenLimit",
    "length",
    "max_tokens",
    "Stop",
    "stop_sequence",
    "stop",
    "end_turn",
    "tool-calls",
    "Complete",
    "STOP",
    "",
    5,
    None,
]:
    echo(f"finish_{fr!r}".replace("'", "").replace(" ", "_"), {"content": "", "finish_reason": fr})
echo("finish_absent", {"content": ""})
usages = {
    "full": {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
        "cached_tokens": 2,
        "cache_write_tokens": 1,
    },
    "no_total": {"prompt_tokens": 10, "completion_tokens": 5},
    "floats": {"prompt_tokens": 10.0, "completion_tokens": 5.5, "total_tokens": 15},
    "negative": {"prompt_tokens": -1, "completion_tokens": 5, "total_tokens": 4},
    "strings": {"prompt_tokens": "10", "completion_tokens": None, "total_tokens": True},
    "small_total": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 3},
    "cached_over_prompt": {"prompt_tokens": 2, "cached_tokens": 5, "completion_tokens": 1, "total_tokens": 0},
    "cost": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2, "cost_usd": 0.5, "cost": 9},
    "huge": {"prompt_tokens": 18446744073709551615, "completion_tokens": 1},
    "not_map": 7,
    "null": None,
    "empty": {},
}
for k, u in usages.items():
    echo(f"usage_{k}", {"content": "", "tokens_used": u})
calls = {
    "basic": [{"id": "c1", "name": "shell", "arguments": {"cmd": "ls"}}],
    "string_args": [{"id": "c1", "name": "shell", "arguments": '{"cmd":"ls"}'}],
    "no_args": [{"id": "c1", "name": "shell"}],
    "null_args": [{"id": "c1", "name": "shell", "arguments": None}],
    "non_object": [5, "x", None],
    "missing_id_name": [{"arguments": [1, 2]}],
    "int_id": [{"id": 5, "name": True}],
    "signature": [
        {"id": "c1", "name": "n", "thought_signature": "sig"},
        {"id": "c2", "name": "n", "thought_signature": 5},
    ],
    "float_args": [{"id": "c", "name": "n", "arguments": {"a": 1.0, "b": 1e21, "c": 1e-7, "d": 0.1}}],
}
for k, c in calls.items():
    echo(f"tool_calls_{k}", {"content": "", "tool_calls": c})
echo("tool_calls_not_array", {"content": "", "tool_calls": {"id": "c"}})
echo(
    "parts",
    {
        "content": "",
        "parts": [
            {"bytes": [137, 80, 78, 71], "mime_type": "image/png", "name": "hero.png"},
            {"data": "AQID"},
            {"data": "!!", "mime_type": "image/png"},
            {"bytes": [], "mime_type": "image/png"},
            {"mime_type": "image/png"},
            {"data": "AQID", "mime_type": "not a type"},
        ],
    },
)

# --- host functions ---------------------------------------------------------------------------
case("hostfns_all", "hostfns.rhai", config={"base_url": "${BASE}", "closed_url": "${CLOSED}"})

# --- errors -----------------------------------------------------------------------------------
thrown = {
    "rate_limited": {"kind": "rate_limited", "message": "slow", "retry_after": 3},
    "transport": {"kind": "transport", "message": "reset"},
    "server": {"kind": "server", "message": "down"},
    "api_plain": {"kind": "api", "message": "HTTP 400 Bad Request: nope"},
    "api_402": {"kind": "api", "message": "HTTP 402 Payment Required: pay"},
    "api_401": {"kind": "api", "message": "HTTP 401 Unauthorized: key"},
    "api_403": {"kind": "api", "message": "HTTP 403 Forbidden: no"},
    "api_credit": {"kind": "api", "message": "Insufficient_Quota for this key"},
    "api_billing": {"kind": "api", "message": "check your Billing details"},
    "api_500_text": {"kind": "api", "message": "HTTP 400 Bad Request: max 500 tokens"},
    "api_overloaded": {"kind": "api", "message": "Overloaded"},
    "invalid_response": {"kind": "invalid_response", "message": "bad shape"},
    "other_transient": {"kind": "weird", "message": "m", "transient": True},
    "other": {"kind": "weird", "message": "m"},
    "no_kind": {"message": "just a message"},
    "empty_message": {"kind": "api", "message": ""},
    "no_message": {"kind": "transport"},
    "kind_int": {"kind": 5, "message": "m"},
    "transient_string": {"kind": "x", "message": "m", "transient": "yes"},
    "failure_kind": {"kind": "transport", "message": "refused", "failure_kind": "connection-refused"},
    "failure_kind_unknown": {"kind": "transport", "message": "x", "failure_kind": "nope"},
    "failure_kind_bracket": {"kind": "api", "message": "[pre] x", "failure_kind": "bad-request"},
    "string": "plain string",
    "int": 42,
    "float": 1.5,
    "array": [1, 2],
    "null": None,
    "bool": False,
}
for k, v in thrown.items():
    case(f"throw_{k}", "throws.rhai", request=req(extra={"mode": "throw", "value": v}))
for mode in ("ops", "type", "missing", "fn_ptr", "blob", "string_cap", "index"):
    case(f"fail_{mode}", "throws.rhai", request=req(extra={"mode": mode}))

# --- streaming --------------------------------------------------------------------------------
chunks = {
    "basic": [
        {"delta": "a"},
        {
            "delta": "b",
            "finish_reason": "stop_sequence",
            "tokens": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
        },
    ],
    "tools": [
        {
            "tool_calls": [
                {"index": 1, "id": "c", "name": "n", "arguments_delta": '{"a"'},
                {"arguments_delta": ":1}"},
            ]
        }
    ],
    "tokens_unit": [{"delta": "x", "tokens": None}],
    "finish_non_string": [{"delta": "x", "finish_reason": 5}],
    "delta_int": [{"delta": 5}],
    "not_map": [5, "s"],
    "fnptr_then_more": ["FNPTR", {"delta": "after"}],
    "empty": [],
}
for k, c in chunks.items():
    case(f"stream_{k}", "streamer.rhai", ops=("stream",), request=req(extra={"chunks": c}))
case(
    "stream_throw_at_end",
    "streamer.rhai",
    ops=("stream",),
    request=req(extra={"chunks": [{"delta": "a"}], "throw_at_end": {"kind": "api", "message": "cut"}}),
)
case(
    "stream_collapsed",
    "echo.rhai",
    ops=("stream",),
    request=req(
        extra={
            "response": {
                "content": "c",
                "tool_calls": [{"id": "i", "name": "n", "arguments": {"b": 1, "a": [1.5]}}],
                "tokens_used": {"prompt_tokens": 1},
                "finish_reason": "length",
            }
        }
    ),
)
sse_bodies = {
    "crlf": 'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\ndata: {"choices":[{"delta":{"content":"b"}}]}\r\n\r\n',
    "multiline": 'data: {"choices":[{"delta":{"content":"a"}}]}\ndata: {"choices":[{"delta":{"content":"IGNORED"}}]}\n\n',
    "comments": ': ping\n\nevent: x\n\ndata: {"choices":[{"delta":{"content":"a"}}]}\n\n',
    "trailing": 'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choices":[{"delta":{"content":"tail"}}]}',
    "done_early": 'data: [DONE]\n\ndata: {"choices":[{"delta":{"content":"late"}}]}\n\n',
}
for k, body in sse_bodies.items():
    case(
        f"seed_groq_sse_{k}",
        "@seed/groq.rhai",
        ops=("stream",),
        routes={"/chat/completions": jr(body, ctype="text/event-stream")},
    )
case(
    "seed_groq_stream_500",
    "@seed/groq.rhai",
    ops=("stream",),
    routes={"/chat/completions": jr("boom", status=500, ctype="text/plain")},
)

# --- count_tokens / list_models -----------------------------------------------------------------
for model in ("int", "neg", "float", "throw", "len", "unit"):
    case(
        f"count_script_{model}",
        "counter.rhai",
        ops=("count_tokens",),
        config={"rows": []},
        count_text="hello \u2713 world",
        count_model=model,
    )
for model in (
    "gpt-4o",
    "o3-mini",
    "o4-mini",
    "claude-3-5-sonnet",
    "gemini-2.0",
    "llama",
    "gpt-3.5-turbo",
    "gpt-unknown-x",
):
    case(
        f"count_heuristic_{model}",
        "plain.rhai",
        ops=("count_tokens",),
        count_text="The quick brown fox \u2713 jumps over \u65e5\u672c 12345.",
        count_model=model,
    )
rows = {
    "good": [
        {"id": "a", "display_name": "A", "max_context_tokens": 1000, "max_output_tokens": 10},
        {"id": "b"},
    ],
    "bad_rows": [
        {"id": 5},
        "x",
        {"display_name": "no id"},
        {"id": "ok", "max_context_tokens": -1, "max_output_tokens": 2.0, "display_name": 3},
    ],
    "not_array": {"id": "a"},
    "throw": "throw",
    "fn": "fn",
    "empty": [],
}
for k, r in rows.items():
    case(f"models_{k}", "counter.rhai", ops=("list_models",), config={"rows": r})
case("models_none", "plain.rhai", ops=("list_models",))

# --- load -------------------------------------------------------------------------------------
case(
    "load_init_throws",
    "@inline",
    source='fn initialize(config) { throw #{ message: "no key" } }\nfn inference(state, request) { #{} }\n',
)
case("load_no_inference", "@inline", source="fn initialize(config) { #{} }\n")
case("load_inference_arity", "@inline", source="fn initialize(config) { #{} }\nfn inference(state) { #{} }\n")
case("load_syntax", "@inline", source="fn initialize(config) { #{} \n")
case(
    "load_import",
    "@inline",
    source='fn initialize(config) { #{} }\nfn inference(state, request) { import "m" as m; #{} }\n',
)
case(
    "load_eval",
    "@inline",
    source='fn initialize(config) { #{} }\nfn inference(state, request) { eval("1") }\n',
)
case(
    "state_not_shared",
    "@inline",
    source="fn initialize(config) { #{ n: 1 } }\nfn inference(state, request) { state.n += 1; #{ content: `${state.n}` } }\n",
    ops=("inference", "inference"),
)

with open(OUT, "w") as fh:
    json.dump(CASES, fh, indent=1, ensure_ascii=False)
print(len(CASES), "cases")
