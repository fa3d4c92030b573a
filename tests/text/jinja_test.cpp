// text/jinja: the Jinja2 subset chat templates use, checked against real Jinja2 (rendered by
// tests/reference/chat_templates.py under transformers' settings) on a table of small
// templates, plus the errors Prism must give where it does not follow.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util/paths.h"
#include "text/jinja/interpreter.h"

namespace prism::text::jinja {
namespace {

using json = nlohmann::ordered_json;

struct Case {
  const char* tmpl;
  const char* vars;  // JSON object of template variables
};

// Each renders under Jinja2 and Prism; output (or failure) must match exactly.
const Case kCases[] = {
    // whitespace: trim_blocks, lstrip_blocks, "-" and "+" modifiers, comments, raw
    {"  {% if true %}\n  x\n  {% endif %}\n  y {{ 'z' }}  \n", "{}"},
    {"{% if true %}  \n x{% endif %}", "{}"},
    {"a\n  {%- if true -%}\n  b  \n  {%- endif %}\nc", "{}"},
    {"a {{- ' b ' -}} c\n{{ 'd' }}\n", "{}"},
    {"x\n  {# comment #}\ny\n{#- c2 -#}\n z", "{}"},
    {"  {%+ if true %}kept{% endif %}\n", "{}"},
    {"{% for i in [1, 2] %}\n  {{ i }}\n{% endfor %}\n", "{}"},
    {"{% raw %}{{ not }} {% evaluated %}{% endraw %}!", "{}"},
    {"line1\r\nline2\n\n", "{}"},
    {"{{ 'a' }}\n\n", "{}"},
    // literals and printing (Python str())
    {"{{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2**10 }} {{ 0.1+0.2 }}", "{}"},
    {"{{ 1e-5 }} {{ 1e16 }} {{ 1.5e300 }} {{ 123456789.125 }} {{ 1_000 }} {{ -0.0 }} {{ 3.0 * 2 }}", "{}"},
    {"{{ [1, 'a', none, True, {'k': 1.5}, (1,), (1, 2), ()] }}", "{}"},
    {"{{ x }}|{{ y }}|{{ z }}", R"({"x": {"a": [1, "b'c"]}, "y": "it's \"q\"", "z": [null, false, 0.5]})"},
    {"{{ none }}|{{ None }}|{{ true }}|{{ False }}|{{ undefined_thing }}|", "{}"},
    {"{{ 'a\\tb\\n\\x41\\u00e9\\'' }}{{ \"q\\\"\" }}{{ 'adj' 'acent' }}", "{}"},
    // operators
    {"{{ 'a' ~ 1 ~ none ~ x }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 1 + 2.5 }} {{ true + 1 }}", R"({"x": 1.0})"},
    {"{{ 1 < 2 < 3 }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 'a' in 'cat' }} {{ 3 not in [1, 2] }}", "{}"},
    {"{{ 'k' in d }} {{ 'z' in d }} {{ not x }} {{ x and 'y' }} {{ x or 'y' }} {{ -x }} {{ +x }}", R"({"d": {"k": 1}, "x": 0})"},
    {"{{ 'yes' if x else 'no' }} {{ 'a' if false }}|{{ 1 if x > 1 else 2 if x > 0 else 3 }}", R"({"x": 1})"},
    // access
    {"{{ m.role }} {{ m['role'] }} {{ m.missing is defined }} {{ m.missing }}| {{ l[0] }} {{ l[-1] }} {{ l.1 }} {{ l[5] }}|", R"({"m": {"role": "user"}, "l": [1, 2, 3]})"},
    {"{{ s[1:] }} {{ s[::-1] }} {{ s[:-1] }} {{ l[1:3] }} {{ l[::2] }} {{ l[-2:] }} {{ l[5:] }} {{ s[-1] }} {{ l[::-2] }}", R"({"s": "héllo", "l": [1, 2, 3, 4]})"},
    {"{{ d.items() | list }} {{ d.keys() | list }} {{ d.values() | list }} {{ d.get('a') }} {{ d.get('z', 0) }} {{ d.get('z') }}", R"({"d": {"b": 1, "a": 2}})"},
    // statements
    {"{% for k, v in d.items() %}{{ loop.index }}{{ k }}={{ v }}{% if not loop.last %}, {% endif %}{% endfor %}", R"({"d": {"x": 1, "y": [2]}})"},
    {"{% for m in ms if m.role != 'system' %}{{ loop.index0 }}/{{ loop.length }}/{{ loop.revindex }}:{{ m.role }}{{ ' first' if loop.first }} {% endfor %}", R"({"ms": [{"role": "system"}, {"role": "user"}, {"role": "assistant"}]})"},
    {"{% for x in [] %}a{% else %}empty{% endfor %}{% for x in none_list %}b{% else %}c{% endfor %}", "{}"},
    {"{% for c in 'ab' %}{{ c }}{{ loop.cycle('x', 'y') }}{{ loop.previtem is defined }}{% endfor %}", "{}"},
    {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}", "{}"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}", "{}"},
    {"{% set ns = namespace(n=0, s='') %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", "{}"},
    {"{% set ns = namespace() %}{% set ns.a = 1 %}{{ ns.a }}{% set a, b = [1, 2] %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", "{}"},
    {"{% if x == 1 %}one{% elif x == 2 %}two{% else %}other{% endif %}", R"({"x": 2})"},
    {"{% set body %}inner {{ 1 + 1 }}{% endset %}[{{ body }}]", "{}"},
    {"{% macro f(a, b='x') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, b=2) }}{{ f(a=3) }}", "{}"},
    {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 }}{% endcall %}", "{}"},
    {"{% for a in [[1, 2], [3]] %}{% for b in a %}{{ loop.index }}{{ b }}{% endfor %}{{ loop.index }};{% endfor %}", "{}"},
    // tests
    {"{{ x is string }} {{ x is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ d is mapping }} {{ l is iterable }} {{ l is sequence }} {{ none is none }}", R"({"x": "s", "d": {}, "l": []})"},
    {"{{ 4 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ x is true }} {{ x is false }} {{ u is undefined }} {{ u is not defined }} {{ 1 is sameas 1 }} {{ none is sameas none }}", R"({"x": true})"},
    {"{{ 'a' is eq 'a' }} {{ 2 is gt 1 }} {{ 2 is lt 1 }} {{ 'a' is in 'abc' }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ f is callable }}", R"({"f": 1})"},
    // filters
    {"{{ '  hi  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world-wide' | title }}|{{ 'hELLO' | capitalize }}|{{ 'AbC' | upper }}{{ 'AbC' | lower }}", "{}"},
    {"{{ l | length }} {{ 'héllo' | length }} {{ d | count }} {{ u | length }} {{ l | first }} {{ l | last }} {{ l | join(', ') }} {{ l | join }} {{ l | reverse | list }} {{ 'abc' | reverse }}", R"({"l": [3, 1, 2], "d": {"a": 1}})"},
    {"{{ u | default('dflt') }} {{ '' | default('e') }} {{ '' | default('e', true) }} {{ none | d('n', boolean=true) }} {{ 0 | default(5) }}", "{}"},
    {"{{ x | tojson }}\n{{ x | tojson(indent=2) }}\n{{ x | tojson(indent=4, sort_keys=true) }}\n{{ x | tojson(separators=(',', ':')) }}", R"({"x": {"b": "é\n\"<>&'\\", "a": [1, 2.5, null, true, {}, [], 1e-07, 100000000000000000000.0], "c": {"z": {"y": []}}}})"},
    {"{{ 'abc' | tojson }} {{ 3 | tojson }} {{ none | tojson }} {{ [] | tojson(indent=2) }} {{ 'tab\\there\\u0001' | tojson }}", "{}"},
    {"{{ d | items | list }} {{ d | dictsort }} {{ l | sort }} {{ l | sort(reverse=true) }} {{ ['b', 'A', 'c'] | sort }} {{ l | unique | list }} {{ ['a', 'A', 'b'] | unique | list }}", R"({"d": {"b": 1, "a": 2}, "l": [3, 1, 3, 2]})"},
    {"{{ '3' | int }} {{ '3.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 2 | float }} {{ -3 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }}", "{}"},
    {"{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 1 | string }} {{ [1] | string }} {{ 'x' | safe }} {{ '<a & b>' | e }}", "{}"},
    {"{{ ms | map(attribute='role') | list }} {{ ms | selectattr('role', 'equalto', 'user') | list | length }} {{ ms | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join(',') }}", R"({"ms": [{"role": "system"}, {"role": "user"}, {"role": "user", "x": 1}]})"},
    {"{{ ms | selectattr('x', 'defined') | list }} {{ ms | selectattr('x') | list | length }} {{ ['a', 'B'] | map('upper') | list }} {{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3] | reject('equalto', 2) | list }}", R"({"ms": [{"role": "system"}, {"role": "user", "x": 1}]})"},
    {"{{ 'line1\\nline2\\n\\nline4' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(width=1, blank=true) }}", "{}"},
    {"{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2, 3] | sum }} {{ ms | sum(attribute='n') }} {{ '%s-%d' | format('a', 3) }} {{ 'one two  three' | wordcount }}", R"({"ms": [{"n": 1}, {"n": 2}]})"},
    // methods
    {"{{ ' x '.strip() }}|{{ 'xxa'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'Hello world'.title() }}", "{}"},
    {"{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'abc'.upper() }} {{ 'aXa'.replace('a', 'b') }} {{ 'abcb'.find('b') }} {{ 'abcb'.rfind('b') }} {{ 'abc'.find('z') }}", "{}"},
    {"{{ '-'.join(['a', 'b']) }} {{ '{} and {}'.format('x', 1) }} {{ '{0}{name}'.format(1, name='n') }} {{ 'abc'.count('b') }} {{ '12'.isdigit() }} {{ 'a\\nb'.splitlines() }}", "{}"},
    {"{{ [1, 2, 2].count(2) }} {{ [1, 2].index(2) }} {{ 'x'.removeprefix('x') }}|{{ 'ab'.capitalize() }}", "{}"},
    // globals
    {"{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }} {{ dict(a=1) }} {{ namespace(a=1).a }}", "{}"},
    // failures Prism must also fail on (messages differ and are not compared)
    {"{{ a.b }}", "{}"},
    {"{{ m.x.y }}", R"({"m": {}})"},
    {"{{ [1, 2].append(3) }}", "{}"},
    {"{{ 'a' + 1 }}", "{}"},
    {"{{ 1 / 0 }}", "{}"},
    {"{{ u | tojson }}", "{}"},
    {"{% set x = 1 %}{% set x.a = 2 %}", "{}"},
    {"{% for a, b in [1, 2] %}{% endfor %}", "{}"},
    {"{{ none() }}", "{}"},
};

json run_oracle(const json& cases, const std::string& name) {
  const std::string dir = test::scratch_dir(name);
  {
    std::ofstream out(dir + "/cases.json");
    out << cases.dump();
  }
  Status st = test::run_reference("chat_templates.py", dir + "/cases.json " + dir + "/out.json");
  EXPECT_TRUE(st.ok()) << st.message();
  std::ifstream in(dir + "/out.json");
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

Entries to_entries(const json& vars) {
  Entries e;
  for (auto it = vars.begin(); it != vars.end(); ++it) e.emplace_back(it.key(), Value::from_json(it.value()));
  return e;
}

TEST(Jinja, MatchesJinja2OnFeatureTable) {
  json cases = json::array();
  for (const Case& c : kCases) cases.push_back({{"template", c.tmpl}, {"vars", json::parse(c.vars)}});
  const json expected = run_oracle(cases, "jinja_features");
  ASSERT_EQ(expected.size(), cases.size());
  int num_ok = 0, num_fail = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i) + ": " + kCases[i].tmpl);
    auto t = Template::parse(kCases[i].tmpl);
    Result<std::string> got = t ? t->render(to_entries(cases[i]["vars"])) : Result<std::string>(t.status());
    if (expected[i]["ok"].get<bool>()) {
      ASSERT_TRUE(got.has_value()) << got.status().message();
      EXPECT_EQ(*got, expected[i]["text"].get<std::string>());
      ++num_ok;
    } else {
      EXPECT_FALSE(got.has_value()) << "Jinja2 failed with: " << expected[i]["error"] << "\nPrism rendered: " << *got;
      ++num_fail;
    }
  }
  EXPECT_GT(num_ok, 50);
  EXPECT_EQ(num_fail, 9);
}

std::string render_error(const std::string& tmpl, const std::string& vars = "{}") {
  auto t = Template::parse(tmpl);
  if (!t) return t.status().message();
  auto r = t->render(to_entries(json::parse(vars)));
  return r ? "rendered: " + *r : r.status().message();
}

TEST(Jinja, UnsupportedConstructsAreNamedErrors) {
  EXPECT_EQ(render_error("a\n\n{% extends 'base.html' %}"), "chat template: unsupported tag 'extends' at line 3");
  EXPECT_EQ(render_error("{% include 'x' %}"), "chat template: unsupported tag 'include' at line 1");
  EXPECT_EQ(render_error("{% frobnicate %}"), "chat template: unknown or unexpected tag 'frobnicate' at line 1");
  EXPECT_EQ(render_error("\n{{ x | frobnicate }}"), "chat template: unsupported filter 'frobnicate' at line 2");
  EXPECT_EQ(render_error("{% if x is frobnicated %}{% endif %}"), "chat template: unsupported test 'frobnicated' at line 1");
  EXPECT_EQ(render_error("{% for x in y recursive %}{% endfor %}"),
            "chat template: unsupported loop modifier 'recursive' at line 1");
  EXPECT_EQ(render_error("{% if x %}"), "chat template: missing '{% endif %}' at line 1");
  EXPECT_EQ(render_error("{{ x "), "chat template: unterminated {{ expression at line 1");
  EXPECT_EQ(render_error("{% endfor %}"), "chat template: unknown or unexpected tag 'endfor' at line 1");
}

TEST(Jinja, RuntimeErrorsNameTheProblem) {
  EXPECT_EQ(render_error("{{ raise_exception('Roles must alternate!') }}"), "Roles must alternate!");
  EXPECT_EQ(render_error("x\n{{ a.b }}"), "chat template: 'a' is undefined at line 2");
  EXPECT_EQ(render_error("{{ m.x.y }}", R"({"m": {}})"), "chat template: 'dict object' has no attribute 'x' at line 1");
  EXPECT_EQ(render_error("{{ [1].append(2) }}"), "chat template: access to attribute 'append' of 'list' object is unsafe. at line 1");
  EXPECT_EQ(render_error("{{ 'a' + 1 }}"), "chat template: can only concatenate str (not \"int\") to str at line 1");
}

TEST(Jinja, GenerationTagRendersItsBody) {
  // transformers' AssistantTracker extension adds {% generation %}; Prism renders its body.
  EXPECT_EQ(render_error("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "rendered: ab1c");
}

TEST(Jinja, StrftimeNowUsesTheClock) {
  auto t = Template::parse("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t.has_value());
  auto r = t->render({});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->size(), 4u);
  EXPECT_GE(std::stoi(*r), 2024);
}

}  // namespace
}  // namespace prism::text::jinja
