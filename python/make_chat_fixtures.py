#!/usr/bin/python3
"""Write the chat template golden fixtures, tests/fixtures/chat/*.json.

    /usr/bin/python3 python/make_chat_fixtures.py [--out tests/fixtures/chat]

Needs only Jinja2 (Debian: apt-get install python3-jinja2). Each template
below is rendered the way Hugging Face's apply_chat_template renders a
tokenizer_config.json "chat_template": a sandboxed Jinja environment with
trim_blocks and lstrip_blocks, the loopcontrols extension, raise_exception()
and add_generation_prompt=True, bos_token/eos_token from the tokenizer. The
JSON files hold the template string, the tokens given to it, and for each
conversation the messages and the rendered text; tests/test_serve_chat.c
writes the template into a tokenizer_config.json, runs srv_chat_detect on it
and compares srv_chat_render's output with the text byte for byte. The C
test needs no Python: the outputs are committed.

The template strings are written here to the formats the model families'
tokenizer_config.json files define:
  llama3   Meta-Llama-3-*-Instruct: bos_token before the first message, each
           message '<|start_header_id|>ROLE<|end_header_id|>\\n\\n' +
           content|trim + '<|eot_id|>', then the assistant header (and
           llama3_no_bos: the same without bos_token);
  llama3.1 Llama-3.1-*-Instruct: {{- bos_token }} first, a system header
           that always holds "Cutting Knowledge Date: December 2023" and
           "Today Date: " + date_string (default "26 Jul 2024"), then the
           system message (the first message when its role is system,
           trimmed), the tool branches, the other messages as llama3;
  chatml   '<|im_start|>ROLE\\n' + content + '<|im_end|>\\n' per message
           (no trim), then '<|im_start|>assistant\\n'.
"""
import argparse
import json
import os

import jinja2
import jinja2.ext
import jinja2.sandbox

LLAMA3 = (
    "{% set loop_messages = messages %}"
    "{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

LLAMA31 = """{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\\n\\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\\n\\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A llama3 template that leaves BOS to the tokenizer (as some fine-tunes'
# do): rendered without it, so the prompt is encoded with the tokenizer's BOS.
LLAMA3_NO_BOS = LLAMA3.replace("{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}", "")
assert LLAMA3_NO_BOS != LLAMA3

# (file name, kind srv_chat_detect must find, template, bos_token, eos_token)
TEMPLATES = [
    ("llama3", "llama3", LLAMA3, "<|begin_of_text|>", "<|eot_id|>"),
    ("llama3_no_bos", "llama3", LLAMA3_NO_BOS, "<|begin_of_text|>", "<|eot_id|>"),
    ("llama3.1", "llama3.1", LLAMA31, "<|begin_of_text|>", "<|eot_id|>"),
    ("chatml", "chatml", CHATML, "<s>", "<|im_end|>"),
]

# Every character Python's str.isspace() accepts, which Jinja's trim (str.strip())
# removes from both ends: the C renderer must trim exactly these.
WS = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())


def msg(role, content):
    return {"role": role, "content": content}


CONVERSATIONS = [
    ("system_user", [msg("system", "You are a helpful assistant."), msg("user", "What is 2+2?")]),
    ("user_only", [msg("user", "Hello!")]),
    (
        "multi_turn",
        [
            msg("system", "Answer in one word."),
            msg("user", "Capital of France?"),
            msg("assistant", "Paris."),
            msg("user", "And of Italy?"),
            msg("assistant", "Rome."),
            msg("user", "Spain?"),
        ],
    ),
    ("user_assistant_user", [msg("user", "hi"), msg("assistant", "Hello, how can I help?"), msg("user", "Tell a joke")]),
    (
        "unicode",
        [msg("system", "Réponds en français. 日本語も可。"), msg("user", "Ça va ? 🙂 Ω≈ç√ — «ok» \u00e9\u0301")],
    ),
    (
        "whitespace",
        [
            msg("system", "  \n\tBe brief.\n\n  "),
            msg("user", "\n\n  two  spaces  inside \n"),
            msg("assistant", " \t "),
            msg("user", "\u3000\u00a0\u2028 unicode spaces\u2003\u0085\u001f\u000b"),
        ],
    ),
    ("every_space", [msg("user", WS + "x" + WS + "y" + WS)]),
    ("empty_content", [msg("system", ""), msg("user", "")]),
    ("system_later", [msg("user", "a"), msg("system", " b "), msg("user", "c")]),
    ("ends_with_assistant", [msg("user", "Say hi"), msg("assistant", "Hi")]),
    ("system_only", [msg("system", "Only a system prompt.")]),
    ("markers_in_content", [msg("user", "<|eot_id|> and <|im_end|> and {{ bos_token }} and \\n")]),
]


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def render(template, bos, eos, messages):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages, bos_token=bos, eos_token=eos, add_generation_prompt=True
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "tests", "fixtures", "chat")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, kind, template, bos, eos in TEMPLATES:
        cases = []
        for cname, messages in CONVERSATIONS:
            cases.append({"name": cname, "messages": messages, "expected": render(template, bos, eos, messages)})
        doc = {
            "generator": "python/make_chat_fixtures.py, Jinja2 " + jinja2.__version__,
            "kind": kind,
            "bos_token": bos,
            "eos_token": eos,
            "chat_template": template,
            "cases": cases,
        }
        path = os.path.join(args.out, name + ".json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=True, indent=1)
            f.write("\n")
        print(f"{path}: {len(cases)} conversations")


if __name__ == "__main__":
    main()
