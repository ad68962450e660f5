import json
from countersign.keyring import _json_strings
_quote = json.encoder.encode_basestring_ascii
def js2(parts):
    try:
        joined = "".join(parts)
    except TypeError:
        return json.dumps(parts).encode()
    if joined.isascii() and joined.isprintable() and '"' not in joined and "\\" not in joined:
        return ('["' + '", "'.join(parts) + '"]').encode()
    return json.dumps(parts).encode()
def js3(parts):
    return ("[" + ", ".join(map(_quote, parts)) + "]").encode()
P = ["bench","u","u","s",""]
