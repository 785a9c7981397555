#!/usr/bin/env python3
"""The openai package against `diffrt serve` (ctest serve_openai).

    tests/serve/run_openai.sh BUILD_DIR/diffrt MODELS_DIR VENV_DIR

(run_openai.sh makes the venv with the openai package, then runs this with
it.) Completions and chat, streaming or not, usage, models.list(), sync and
async, and every error raised as the SDK's own exception type, with
max_retries=0 so the statuses show as they are.
"""

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srv import Server  # noqa: E402


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--diffrt", required=True)
    ap.add_argument("--models", required=True)
    a = ap.parse_args()
    mdl = os.path.join(a.models, "diff-v1-tiny")
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "serve")
    with open(os.path.join(fixtures, "niah_diff-v1-tiny.json")) as f:
        niah = json.load(f)["prompts"]
    with open(os.path.join(mdl, "prompt.txt")) as f:
        readme_prompt = f.read()
    S = Server(a.diffrt, mdl, "--chat-template", "plain", "--parallel", "2", "--queue", "0", "--step-delay", "0")
    ok = 0
    try:
        base = f"http://{S.host}:{S.port}/v1"
        c = openai.OpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)

        # the README's needle question
        r = c.completions.create(model="diff-v1-tiny", prompt=readme_prompt, max_tokens=8, temperature=0)
        check(r.choices[0].text == " 6019.", f"README prompt: {r.choices[0].text!r}")
        check(r.usage.prompt_tokens > 100 and r.usage.completion_tokens >= 1, f"usage {r.usage}")
        check(r.object == "text_completion" and r.id.startswith("cmpl-"), f"object {r.object} id {r.id}")
        ok += 1
        for p in niah[:5]:
            r = c.completions.create(model="diff-v1-tiny", prompt=p["prompt"], max_tokens=8, temperature=0)
            check("".join(ch for ch in r.choices[0].text if ch.isdigit()) == p["answer"],
                  f"needle {p['answer']}: {r.choices[0].text!r}")
        ok += 1
        # streaming, with usage
        chunks = list(c.completions.create(model="diff-v1-tiny", prompt=readme_prompt, max_tokens=8, temperature=0,
                                           stream=True, stream_options={"include_usage": True}))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        check(text == " 6019.", f"streamed {text!r}")
        check(chunks[-1].usage and chunks[-1].usage.completion_tokens >= 1, f"stream usage {chunks[-1]}")
        ok += 1
        # chat, whole and streamed
        msgs = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Hello"}]
        r = c.chat.completions.create(model="diff-v1-tiny", messages=msgs, max_tokens=6, temperature=0)
        check(r.choices[0].message.role == "assistant" and isinstance(r.choices[0].message.content, str),
              f"chat {r}")
        check(r.object == "chat.completion", r.object)
        st = list(c.chat.completions.create(model="diff-v1-tiny", messages=msgs, max_tokens=6, temperature=0,
                                            stream=True))
        streamed = "".join(ch.choices[0].delta.content or "" for ch in st if ch.choices)
        check(streamed == r.choices[0].message.content, f"chat stream {streamed!r} vs {r.choices[0].message.content!r}")
        check(st[0].choices[0].delta.role == "assistant", "first delta's role")
        ok += 1
        # models
        ms = c.models.list()
        check([m.id for m in ms.data] == ["diff-v1-tiny"], f"models {ms}")
        ok += 1
        # errors as the SDK's exceptions
        try:
            c.completions.create(model="diff-v1-tiny", prompt="x", temperature=5)
            raise AssertionError("temperature 5 was accepted")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and "temperature" in str(e), f"BadRequestError {e}")
        try:
            c.completions.create(model="gpt-4", prompt="x")
            raise AssertionError("model gpt-4 was accepted")
        except openai.NotFoundError as e:
            check(e.status_code == 404, f"NotFoundError {e}")
        try:
            c.completions.create(model="diff-v1-tiny", prompt=readme_prompt, max_tokens=100)
            raise AssertionError("a prompt past the context was accepted")
        except openai.BadRequestError as e:
            check("maximum context length" in str(e), f"context {e}")
        ok += 1

        # async: two requests at once
        async def two():
            ac = openai.AsyncOpenAI(base_url=base, api_key="none", max_retries=0, timeout=60)
            rs = await asyncio.gather(*[ac.completions.create(model="diff-v1-tiny", prompt=p["prompt"], max_tokens=8,
                                                              temperature=0) for p in niah[:2]])
            await ac.close()
            return rs

        rs = asyncio.run(two())
        for p, r in zip(niah[:2], rs):
            check("".join(ch for ch in r.choices[0].text if ch.isdigit()) == p["answer"], f"async {r}")
        ok += 1
    finally:
        rc = S.stop()
    check(rc == 0, f"exit status {rc}")
    # auth and 503 with the SDK
    kdir = tempfile.mkdtemp(prefix="drt-keys-")
    keys = os.path.join(kdir, "keys")
    with open(keys, "w") as f:
        f.write("sk-test\n")
    S = Server(a.diffrt, mdl, "--api-key-file", keys, "--parallel", "1", "--queue", "0", "--step-delay", "30")
    try:
        base = f"http://{S.host}:{S.port}/v1"
        try:
            openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
            raise AssertionError("a wrong key was accepted")
        except openai.AuthenticationError as e:
            check(e.status_code == 401, f"AuthenticationError {e}")
        c = openai.OpenAI(base_url=base, api_key="sk-test", max_retries=0, timeout=60)
        held = c.completions.create(model="diff-v1-tiny", prompt="The", max_tokens=60, stream=True,
                                    extra_body={"ignore_eos": True})
        next(iter(held))
        try:
            c.completions.create(model="diff-v1-tiny", prompt="The", max_tokens=2)
            raise AssertionError("no 503 with the slot busy and no queue")
        except openai.InternalServerError as e:
            check(e.status_code == 503, f"503 {e}")
        held.close()
        ok += 1
    finally:
        rc = S.stop()
        shutil.rmtree(kdir, ignore_errors=True)
    check(rc == 0, f"exit status {rc}")
    print(f"openai {openai.__version__}: {ok} groups passed")


if __name__ == "__main__":
    main()
