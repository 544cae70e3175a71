"""Expected chat prompts: vLLM's message preprocessing, then the template
rendered by real Jinja2 set up exactly as transformers' apply_chat_template
(trim_blocks, lstrip_blocks, loopcontrols, its tojson, raise_exception,
strftime_now, continue_final_message). Reads chats.json, writes chats.expected.json.
Run from this directory: python3 render_chat.py (needs jinja2)."""
import copy, json, re, sys
from datetime import datetime
import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime(2025, 3, 7, 12, 0, 0)  # the Go test pins the same clock

class AssistantTracker(Extension):
    tags = {"generation"}
    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)
    def _gen(self, caller):
        return caller()

def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

def env():
    e = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    e.filters["tojson"] = tojson
    e.globals["raise_exception"] = raise_exception
    e.globals["strftime_now"] = lambda f: NOW.strftime(f)
    return e

# vLLM's content format detection (vllm/renderers/hf.py) on the real AST.
def _var(node, name):
    return isinstance(node, jinja2.nodes.Name) and node.ctx == "load" and node.name == name
def _attr(node, name, key):
    if isinstance(node, jinja2.nodes.Getitem):
        return _var(node.node, name) and isinstance(node.arg, jinja2.nodes.Const) and node.arg.value == key
    if isinstance(node, jinja2.nodes.Getattr):
        return _var(node.node, name) and node.attr == key
    return False
def _elems(node, name, key=None):
    if isinstance(node, jinja2.nodes.Filter):
        return node.node is not None and _elems(node.node, name, key)
    if isinstance(node, jinja2.nodes.Test):
        return _elems(node.node, name, key)
    if isinstance(node, jinja2.nodes.Getitem) and isinstance(node.arg, jinja2.nodes.Slice):
        return _elems(node.node, name, key)
    return _attr(node, name, key) if key else _var(node, name)
def openai_format(src):
    ast = env().parse(src)
    names, queue = ["messages"], ["messages"]
    while queue:
        v = queue.pop(0)
        for a in ast.find_all(jinja2.nodes.Assign):
            if _elems(a.node, v) and isinstance(a.target, jinja2.nodes.Name):
                names.append(a.target.name)
                if a.target.name != v:
                    queue.append(a.target.name)
    loops = [l.target.name for l in ast.find_all(jinja2.nodes.For) if any(_elems(l.iter, n) for n in names)]
    return any(_elems(l.iter, m, "content") for l in ast.find_all(jinja2.nodes.For) for m in loops)

TEXT = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}

def conversation(messages, openai):
    out = []
    for m in messages:
        role, content = m["role"], m.get("content")
        parts = [] if content is None else ([{"type": "text", "text": content}] if isinstance(content, str) else content)
        texts = []
        for p in parts:
            if isinstance(p, str):
                texts.append(p); continue
            t = p.get(TEXT[p["type"]])
            if t is not None:
                texts.append(t)
        msg = {"role": role}
        msg["content"] = [{"type": "text", "text": t} for t in texts] if openai else "\n".join(texts)
        if role == "assistant":
            if m.get("tool_calls") is not None:
                msg["tool_calls"] = copy.deepcopy(list(m["tool_calls"]))
            if m.get("reasoning") is not None:
                msg["reasoning"] = m["reasoning"]; msg["reasoning_content"] = m["reasoning"]
        elif role == "tool":
            if "tool_call_id" in m:
                msg["tool_call_id"] = m["tool_call_id"]
            if isinstance(msg["content"], list):
                msg["content"] = "\n".join(p["text"] for p in msg["content"])
        for k in ("name", "task"):
            if isinstance(m.get(k), str):
                msg[k] = m[k]
        if role == "developer":
            msg["tools"] = m.get("tools")
        out.append(msg)
    for msg in out:
        if msg["role"] == "assistant" and "tool_calls" in msg:
            if not msg["tool_calls"]:
                del msg["tool_calls"]; continue
            for c in msg["tool_calls"]:
                a = c["function"].get("arguments")
                if isinstance(a, str):
                    try:
                        c["function"]["arguments"] = json.loads(a)
                    except json.JSONDecodeError:
                        c["function"]["arguments"] = {}
                elif not isinstance(a, (dict, list)):
                    c["function"]["arguments"] = {}
    return out

def tool_schema(t):
    f = t["function"]
    fd = {"name": f["name"], "description": f.get("description"), "parameters": f.get("parameters")}
    fd.update({k: v for k, v in f.items() if k not in fd})
    d = {"type": "function", "function": fd}
    d.update({k: v for k, v in t.items() if k not in d})
    return d

def render(src, special, req):
    openai = openai_format(src)
    msgs = conversation(req["messages"], openai)
    ctx = dict(special)
    tools = req.get("tools")
    ctx.update(messages=msgs, tools=None if tools is None else [tool_schema(t) for t in tools],
               documents=req.get("documents"), add_generation_prompt=req.get("add_generation_prompt", True))
    if req.get("reasoning_effort") is not None:
        ctx["reasoning_effort"] = req["reasoning_effort"]
    ctx.update(req.get("chat_template_kwargs") or {})
    cont = req.get("continue_final_message", False)
    if cont and ctx["add_generation_prompt"]:
        raise ValueError("continue_final_message and add_generation_prompt")
    out = env().from_string(src).render(**ctx)
    if cont:
        final = msgs[-1]["content"]
        if isinstance(final, list):
            final = [b["text"] for b in final if "text" in b][-1]
        loc = out.rindex(final.strip())
        if out[loc:loc + len(final.lstrip())] == final:
            out = out[:loc + len(final.lstrip())]
        else:
            out = out[:loc + len(final.strip())]
    return out

if __name__ == "__main__":
    spec = json.load(open("chats.json"))
    res = {}
    for tname, tinfo in spec["templates"].items():
        src = open("../templates/" + tinfo["file"]).read()
        for cname, req in spec["chats"].items():
            try:
                res[tname + "/" + cname] = render(src, tinfo["special_tokens"], req)
            except Exception as e:
                res[tname + "/" + cname] = "ERROR: " + type(e).__name__
    json.dump(res, open("chats.expected.json", "w"), ensure_ascii=False, indent=1, sort_keys=True)
    print(len(res), "renderings", file=sys.stderr)
