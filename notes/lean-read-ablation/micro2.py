import sys, timeit, json
sys.path.insert(0, "/work/wt/lean-read")
from countersign.path import policy, turn
from countersign.canonical import compact, canonical
def t(name, stmt, n=50000):
    s = min(timeit.repeat(stmt, number=n, repeat=5, globals=globals())) / n * 1e6
    print(f"{name:<40} {s:8.2f} us")
DEC = json.JSONDecoder(object_pairs_hook=policy._no_duplicates, parse_constant=policy._no_constant, parse_float=policy._finite)
ENC = json.JSONEncoder(ensure_ascii=False)
text = '{"status": "done"}'
t("decode_arguments", "policy.decode_arguments(text)")
t("DEC.decode", "DEC.decode(text)")
t("json.loads hooks", "json.loads(text, object_pairs_hook=policy._no_duplicates, parse_constant=policy._no_constant, parse_float=policy._finite)")
t("_depth", "policy._depth({'status': 'done'})")
t("surrogate check", "json.dumps({'status': 'done'}, ensure_ascii=False).encode('utf-8')")
t("size check", "len(text) > 65536 or len(text.encode('utf-8', 'surrogatepass')) > 65536")
t("isascii+\\u", "text.isascii() and '\\\\u' not in text")
body = {"todos": [], "count": 0}
t("json.dumps answer", "json.dumps(body, ensure_ascii=False)")
t("ENC.encode answer", "ENC.encode(body)")
t("fact_entry", "turn.fact_entry('list_todos', 'succeeded', '0 result(s)')")
t("canonical fact", "canonical({'k': 'fact', 'tool': 'list_todos', 'status': 'succeeded', 'summary': '0 result(s)'})")
t("compact fact", "compact({'k': 'fact', 'tool': 'list_todos', 'status': 'succeeded', 'summary': '0 result(s)'}).encode('utf-8')")
