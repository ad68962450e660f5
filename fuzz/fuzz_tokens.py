"""Coverage-guided fuzzing (atheris / libFuzzer) of the token parser: ``Keyring.parse_token``.

Property: for any text, parse_token either raises InvalidArgument (CONFIRMATION_TOKEN_INVALID) or accepts a token
that is exactly what the keyring itself issues for that key id, action id and label. Anything else (another
exception, a forged token accepted) is a crash that libFuzzer reports with the input that caused it.

    .venv/bin/python fuzz/fuzz_tokens.py -max_total_time=60 [CORPUS_DIR]

Any libFuzzer flag works (-runs=N, -max_len=N, -artifact_prefix=DIR/); tests/test_fuzz.py runs it for a bounded time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from countersign.errors import InvalidArgument
    from countersign.keyring import Keyring

KEYRING = Keyring(active="k1", keys={"k1": bytes.fromhex("11" * 32), "k0": bytes.fromhex("22" * 32)})
LABELS = ["confirm", "continue"]  # the confirmation and the continuation token labels
ACTION = "0123456789abcdef0123456789abcdef"
REAL = {label: [KEYRING.token(ACTION, kid, label) for kid in KEYRING.keys] for label in LABELS}


def candidate(fdp: atheris.FuzzedDataProvider, label: str) -> str:
    """Free text, or a real token with bytes overwritten, cut, inserted or its parts replaced."""
    mode = fdp.ConsumeIntInRange(0, 4)
    if mode == 0:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 300))  # may hold lone surrogates
    real = fdp.PickValueInList(REAL[label])
    if mode == 1:  # overwrite a few characters
        chars = list(real)
        for _ in range(fdp.ConsumeIntInRange(1, 4)):
            chars[fdp.ConsumeIntInRange(0, len(chars) - 1)] = fdp.ConsumeUnicodeNoSurrogates(1) or "."
        return "".join(chars)
    if mode == 2:  # cut a slice out
        i, j = sorted((fdp.ConsumeIntInRange(0, len(real)), fdp.ConsumeIntInRange(0, len(real))))
        return real[:i] + real[j:]
    if mode == 3:  # insert text
        i = fdp.ConsumeIntInRange(0, len(real))
        return real[:i] + fdp.ConsumeUnicode(fdp.ConsumeIntInRange(1, 40)) + real[i:]
    parts = real.split(".")  # replace one dot-separated part
    parts[fdp.ConsumeIntInRange(0, len(parts) - 1)] = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 60))
    return ".".join(parts)


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    label = fdp.PickValueInList(LABELS)
    token = candidate(fdp, label)
    try:
        kid, action_id = KEYRING.parse_token(token, label)
    except InvalidArgument as exc:
        if exc.reason != "CONFIRMATION_TOKEN_INVALID" or not exc.message:
            raise AssertionError(f"unexpected reason {exc.reason!r} / message {exc.message!r}") from exc
        return
    if KEYRING.token(action_id, kid, label) != token:
        raise AssertionError(f"accepted a token the keyring never issued: {token!r}")


def main() -> None:
    argv = list(sys.argv)
    if not any(a.startswith("-dict=") for a in argv):
        argv.append(f"-dict={Path(__file__).resolve().parent / 'tokens.dict'}")
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
