import re
from typing import Any
_INT_MAX = 2**53 - 1
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_LEAVES = frozenset({str, bool, type(None)})


def _plain2(value: Any, depth: int = 0) -> bool:
    kind = type(value)
    if kind is dict:
        if depth > 64:
            return False
        for key, item in value.items():
            if type(key) is not str or (not key.isascii() and _ASTRAL.search(key)):
                return False
            kind = type(item)
            if kind in _LEAVES:
                continue
            if kind is int:
                if -_INT_MAX <= item <= _INT_MAX:
                    continue
                return False
            if not _plain2(item, depth + 1):
                return False
        return True
    if kind in _LEAVES:
        return True
    if kind is int:
        return bool(-_INT_MAX <= value <= _INT_MAX)
    if kind is list or kind is tuple:
        if depth > 64:
            return False
        for item in value:
            kind = type(item)
            if kind in _LEAVES:
                continue
            if kind is int:
                if -_INT_MAX <= item <= _INT_MAX:
                    continue
                return False
            if not _plain2(item, depth + 1):
                return False
        return True
    return False
