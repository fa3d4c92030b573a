"""Reference renders of chat templates with real Jinja2, set up the way transformers'
apply_chat_template renders them (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks,
loopcontrols, its tojson / raise_exception / strftime_now), for text/chat_template and
text/jinja tests.

Usage: chat_templates.py CASES.json OUT.json

CASES.json is a list of cases, each {"template": str} plus either
  "vars": {...}                      rendered as template.render(**vars), or
  "messages", "tools", "add_generation_prompt", "special_tokens", "extra"
                                     rendered as transformers does: render(messages=...,
                                     tools=tools or None, documents=None,
                                     add_generation_prompt=..., **special_tokens, **extra).
OUT.json gets one result per case: {"ok": true, "text": str} or
{"ok": false, "error": str, "template_error": bool}; template_error marks a
raise_exception() from the template itself.
"""

import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateRaised(jinja2.exceptions.TemplateError):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, case):
    template = env.from_string(case["template"])
    if "vars" in case:
        return template.render(**case["vars"])
    kwargs = dict(case.get("special_tokens", {}))
    kwargs.update(case.get("extra", {}))
    return template.render(messages=case["messages"], tools=case.get("tools"), documents=None,
                           add_generation_prompt=case.get("add_generation_prompt", False), **kwargs)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    env = environment()
    results = []
    for case in cases:
        try:
            results.append({"ok": True, "text": render(env, case)})
        except Exception as e:  # the C++ side must fail too; the message is compared for raises
            results.append({"ok": False, "error": str(e), "template_error": isinstance(e, TemplateRaised)})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
