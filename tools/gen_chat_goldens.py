#!/usr/bin/env python3
"""Golden outputs for the chat-template interpreter (src/runtime/chat), rendered by the reference: Python jinja2.

Every template in tests/data/chat_templates/templates/*.jinja (listed with its special tokens in templates.json) is
rendered for every conversation in conversations.json, configured exactly as Hugging Face transformers renders chat
templates (transformers/utils/chat_template_utils.py):
  - ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension and a
    `{% generation %}` block that only renders its body (HF's AssistantTracker, as used without assistant masks);
  - the `tojson` filter replaced by json.dumps(x, ensure_ascii=False, indent=indent) (no HTML escaping, keys in order);
  - globals raise_exception(msg) (raises TemplateError(msg)) and strftime_now(fmt);
  - render(messages=..., tools=None, documents=None, add_generation_prompt=..., bos_token=..., eos_token=..., **vars),
    a token that the tokenizer lacks (null in templates.json) being left out, hence undefined.

Each template gets goldens/<template>.json: {case name: {"output": text} | {"raise": message} | {"error": text}}.
"raise" is a raise_exception() call (the C++ side must throw ga::Error with exactly that message); "error" is any other
render failure (TypeError, UndefinedError, ...), where the C++ side must throw too but its wording is its own.

Usage: python3 tools/gen_chat_goldens.py   (rewrites the goldens; the C++ test reads them and needs no Python)
"""
import json
import os
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "chat_templates")


class RaisedByTemplate(jinja2.exceptions.TemplateError):
    """raise_exception() from inside a template: the only failure whose message is part of the contract."""


def raise_exception(message):
    raise RaisedByTemplate(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # HF's definition: no HTML-safe escaping (jinja2's own tojson would turn < > & ' into \u003c ...).
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


class GenerationBlock(Extension):
    """`{% generation %}...{% endgeneration %}` renders its body unchanged, like HF's AssistantTracker."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_case(template, tokens, case):
    kwargs = {"messages": case["messages"], "tools": None, "documents": None,
              "add_generation_prompt": case["add_generation_prompt"]}
    for name in ("bos_token", "eos_token"):
        if tokens.get(name) is not None:
            kwargs[name] = tokens[name]
    kwargs.update(case.get("vars", {}))
    try:
        return {"output": template.render(**kwargs)}
    except RaisedByTemplate as e:
        return {"raise": e.message}
    except Exception as e:  # any other failure: the C++ interpreter must fail as well
        return {"error": "%s: %s" % (type(e).__name__, e)}


def main():
    env = make_environment()
    with open(os.path.join(ROOT, "templates.json"), encoding="utf-8") as f:
        manifest = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    with open(os.path.join(ROOT, "conversations.json"), encoding="utf-8") as f:
        cases = json.load(f)
    out_dir = os.path.join(ROOT, "goldens")
    os.makedirs(out_dir, exist_ok=True)
    for name, tokens in manifest.items():
        # newline="" keeps the template's bytes exactly as stored (jinja2 itself normalizes line endings).
        with open(os.path.join(ROOT, "templates", name + ".jinja"), encoding="utf-8", newline="") as f:
            template = env.from_string(f.read())
        goldens = {case["name"]: render_case(template, tokens, case) for case in cases}
        with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8", newline="\n") as f:
            json.dump(goldens, f, ensure_ascii=False, indent=1)
            f.write("\n")
        kinds = [next(iter(g)) for g in goldens.values()]
        print("%-26s %2d outputs, %2d raise, %2d other errors" % (
            name, kinds.count("output"), kinds.count("raise"), kinds.count("error")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
