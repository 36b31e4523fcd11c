#!/usr/bin/env python3
"""Prints the kJinja2Cases table of jinja_test.cc: (feature, template, rendering by jinja2).

Renders each template with jinja2 set up as Hugging Face transformers does for chat templates
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson = json.dumps with
ensure_ascii=False, raise_exception). Checked with jinja2 3.1.6. Usage: python3 jinja_reference.py > table
"""
import json

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception


def render(template, **variables):
    return env.from_string(template).render(**variables)


# The variables every case sees (kContext in jinja_test.cc).
CTX = {"u": None, "s": "héllo wörld", "l": [3, 1, 2], "d": {"b": 1, "a": [1, 2], "c": {"x": "y"}},
       "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "tool_calls": []},
                {"role": "user", "content": "bye", "name": "n"}],
       "n": 7, "f": 2.5, "t": True, "e": "", "empty": [], "num_s": "42", "ws": "  \n a b \t "}
CASES = [
 ("values print as Python str()", "{{ s }}|{{ n }}|{{ f }}|{{ t }}|{{ u }}|{{ l }}|{{ d }}|{{ nope }}|"),
 ("Python reprs in lists", "{{ [1, 'a', none, true, 1.5, {'k': [u]}] }} {{ [\"x'y\", 'a\"b', 'c\\'d\"'] }}"),
 ("repr escapes unprintable characters", "{{ ['a\\u2028b', '\\x00\\x7f\\xa0\\t', 'é😀', '\\u200b'] }}"),
 ("tuples print as tuples", "{{ ('a', 1) }} {{ (1,) }} {{ () }} {{ 1, 2 }} {{ d.items()|list }} {{ d|dictsort|first }} {{ (1, 2) == [1, 2] }} {{ (1, 2)|list }}"),
 ("float formatting", "{{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1_000 }} {{ 10 / 3 }} {{ 1e16 }} {{ 1.5e-7 }} {{ -0.0 }} {{ 3.0 }} {{ 2 ** -1 }}"),
 ("string literals and escapes", "{{ \"it's\" }} {{ 'say \"hi\"' }} {{ 'a' 'b' }} {{ \"\\x41\\101\\u00e9\\U0001F600\" }} {{ 'a\\\\nb' }} {{ 'tab\\there' }}"),
 ("indexing and slicing count code points", "{{ s|upper }} {{ s|length }} {{ s[1] }} {{ s[::-1] }} {{ s[1:4] }} {{ s[-3:] }} {{ l[::2] }} {{ l[-1] }}"),
 ("list slices", "{{ l[1:] }} {{ l[:1] }} {{ l[::-1] }} {{ l[-2:] }} {{ l[5:] }} {{ s[:-1] }} {{ l[1:2:1] }}"),
 ("arithmetic", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ l + [4] }}"),
 ("concatenation with ~ and +", "{{ 'a' ~ 1 ~ u ~ nope ~ t }} {{ \"x\" + \"y\" }}"),
 ("precedence: filters and tests bind tighter than arithmetic and not", "{{ l|length - 1 }} {{ -n|abs }} {{ not t }} {{ not nope is defined }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 5 }}"),
 ("if / elif / else", "{% if n > 5 %}big{% elif n > 2 %}mid{% else %}small{% endif %}"),
 ("conditional expressions", "{{ 'a' if t else 'b' }} {{ 'a' if not t else 'b' }} [{{ 'a' if false }}]"),
 ("and / or return an operand", "{{ t and 'yes' }} {{ e or 'fallback' }} {{ 0 or '' }} {{ n and l }}"),
 ("loop variables", "{% for x in l %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}"),
 ("for ... if filters before counting", "{% for x in l if x > 1 %}{{ x }}/{{ loop.index }}/{{ loop.length }} {% else %}none{% endfor %}"),
 ("for ... else", "{% for x in empty %}{{ x }}{% else %}empty!{% endfor %}"),
 ("tuple unpacking over items()", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"),
 ("the items filter", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}{% for k, v in nope|items %}x{% endfor %}"),
 ("iterating a dict and a string", "{% for k in d %}{{ k }},{% endfor %}{% for c in 'abc' %}{{ c }}-{% endfor %}"),
 ("nested loops have their own loop", "{% for a in [[1,2],[3,4]] %}{% for b in a %}{{ loop.index }}.{{ b }} {% endfor %}{{ loop.index }}|{% endfor %}"),
 ("break and continue", "{% for x in l %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 2 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
 ("loop.cycle", "{% for x in l %}{{ loop.cycle('a', 'b') }}{% endfor %}"),
 ("namespace attributes outlive loop iterations", "{% set ns = namespace(a=1, b='x') %}{% for x in l %}{% set ns.a = ns.a + x %}{% endfor %}{{ ns.a }}{{ ns.b }}"),
 ("set in a loop does not leak out", "{% set x = 1 %}{% for i in l %}{% set x = i %}{% endfor %}{{ x }}"),
 ("set in a loop lasts one iteration", "{% for m in msgs %}{% if m.role == 'user' %}{% set content = m.content %}{% endif %}[{{ content }}]{% endfor %}"),
 ("set in an if sets the outer scope", "{% if t %}{% set y = 5 %}{% endif %}{{ y }}"),
 ("set with tuples and blocks", "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set x %}inner {{ n }}{% endset %}[{{ x }}]"),
 ("macros", "{% macro greet(name, punct='!') %}Hello {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(name='c', punct='.') }}"),
 ("tojson: json.dumps(ensure_ascii=False) separators and escapes", "{{ d|tojson }} {{ l|tojson }} {{ s|tojson }} {{ \"a\\\"b\\\\c\\n\\t\\u0001é\"|tojson }} {{ f|tojson }} {{ u|tojson }} {{ t|tojson }}"),
 ("tojson(indent=2)", "{{ d|tojson(indent=2) }}"),
 ("tojson options", "{{ d|tojson(sort_keys=true) }} {{ {'é': 1}|tojson(ensure_ascii=true) }} {{ d|tojson(separators=(',', ':')) }} {{ []|tojson(indent=2) }}{{ {}|tojson(indent=2) }}{{ [[]]|tojson(indent=1) }}"),
 ("string filters", "{{ ws|trim }}|{{ 'xxaxx'|trim('x') }}|{{ s|title }}|{{ 'hello'|capitalize }}|{{ s|replace('l','_') }}|{{ '<a>&'|e }}|{{ '<b>'|safe }}"),
 ("sequence filters", "{{ l|first }}|{{ l|last }}|{{ l|join('-') }}|{{ l|join }}|{{ empty|first }}|{{ l|sort }} {{ l|sort(reverse=true) }} {{ l|max }} {{ l|min }} {{ l|sum }} {{ l|reverse|list }} {{ [1,2,1,3]|unique|list }} {{ ['b','A','a']|sort }}"),
 ("default", "{{ nope|default('def') }}|{{ e|default('def', true) }}|{{ e|default('def') }}|{{ u|d('x') }}"),
 ("selectattr / rejectattr / map", "{{ msgs|selectattr('role', 'equalto', 'user')|map(attribute='content')|join(',') }}|{{ msgs|rejectattr('role', 'eq', 'user')|list|length }}|{{ msgs|selectattr('name')|list|length }}|{{ msgs|selectattr('name', 'defined')|map(attribute='name')|first }}|{{ msgs|map(attribute='name', default='?')|join(',') }}"),
 ("select / reject / map with a filter", "{{ l|map('string')|join('|') }} {{ ['a','b']|map('upper')|list }} {{ l|select('odd')|list }} {{ l|reject('odd')|list }} {{ l|select('gt', 1)|list }} {{ ['x', 'code_interpreter']|reject('equalto', 'code_interpreter')|join(', ') }}"),
 ("conversions", "{{ l|string }} {{ 5|string }} {{ 'abc'|list }} {{ d|list }} {{ num_s|int + 1 }} {{ 'x'|int }} {{ '3.5'|float }} {{ f|int }} {{ 3|round }} {{ 2.567|round(2) }} {{ 2.5|round }}"),
 ("indent", "{{ \"line1\\nline2\\n\\nline4\"|indent }}|{{ \"a\\nb\"|indent(2, true) }}|{{ \"a\\n\\nb\"|indent(2, blank=true) }}"),
 ("str methods", "{{ s.startswith('hé') }} {{ s.endswith('x') }} {{ s.startswith(('x', 'h')) }} {{ s.split(' ') }} {{ s.split() }} {{ ws.split() }} {{ ws.strip() }}|{{ ws.lstrip() }}|{{ ws.rstrip() }}|{{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '\\nx\\n'.strip('\\n') }}"),
 ("more str methods", "{{ s.replace('l', 'L') }} {{ s.replace('l', 'L', 1) }} {{ s.upper() }} {{ 'ABC'.lower() }} {{ s.title() }} {{ s.find('w') }} {{ s.count('l') }} {{ '-'.join(['a','b']) }} {{ 'abc'.isalpha() }}{{ '12'.isdigit() }}{{ \"a\\nb\\r\\nc\".splitlines() }}"),
 ("dict methods and attribute access", "{{ d.get('b') }} {{ d.get('zz') }} {{ d.get('zz', 5) }} {{ d.keys()|list }} {{ d.values()|list }} {{ d['a'][1] }} {{ d.c.x }} {{ d.a.0 }}"),
 ("tests", "{{ nope is defined }} {{ nope is undefined }} {{ u is none }} {{ s is string }} {{ d is mapping }} {{ l is sequence }} {{ s is sequence }} {{ n is number }} {{ t is true }} {{ t is false }} {{ n is integer }} {{ f is float }} {{ t is boolean }} {{ n is odd }} {{ n is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ s is iterable }} {{ n is iterable }} {{ n is not none }} {{ t is number }} {{ t is integer }}"),
 ("in and not in", "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 1 in l }} {{ 'b' in d }} {{ 'zz' in d }} {{ 'x' in nope }} {{ n in l }}"),
 ("missing keys, indexes and None's attributes are undefined", "{{ u.foo }}|{{ d.zz }}|{{ d['zz'] }}|{{ l[10] }}|{{ s[100] }}|{{ nope }}|{{ nope|length }}"),
 ("range, dict, namespace", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ dict(a=1)|tojson }} {{ namespace(x=1).x }}"),
 ("raw", "{% raw %}{{ not rendered }}{% endraw %}"),
 ("trim_blocks and lstrip_blocks", "  {% if t %}\n    x\n  {% endif %}\ny\n<ul>\n    {% for x in l %}\n    <li>{{ x }}</li>\n    {% endfor %}\n</ul>"),
 ("whitespace control with -", "  {%- if t -%}\n    x\n  {%- endif %}  \ny\na {{- ' b ' -}} c\n{{ 'c' -}}\n   d"),
 ("comments", "a\n{# comment #}\nd  {#- c -#}  e\n  {# indented comment #}\nf{##}g"),
 ("+ turns lstrip and trim off", "{%+ if t %}  keep{% endif +%}\nafter\n  {%+ if t %}x{% endif %}"),
 ("lstrip only applies at line start", "text {% if t %}inline{% endif %} more\n   {% if t %}\n   {{ 'v' }}   {% endif %}\nx\t{% if t %}tab{% endif %}\n\t{% if t %}tab2{% endif %}"),
 ("one trailing newline is dropped", "{{ t }}\n"),
 ("brackets may span lines and hold }}", "{% set x = [1, 2,\n   3] %}{{ x }}{{ {'a': {'b': 1}} }}{{ {'a': {'b': 1}}['a']['b'] }}"),
]
def cstr(s):
    for delim in ["J", "JJ", "JJJ"]:
        if (")" + delim + '"') not in s: return f'R"{delim}({s}){delim}"'
    raise ValueError(s)
print("// clang-format off")
for name, t in CASES:
    out = render(t, **CTX)
    print(f"    {{{json.dumps(name)},\n     {cstr(t)},\n     {cstr(out)}}},")
print("// clang-format on")
