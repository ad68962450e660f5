"""The approvals settings file: one bad file per rule, the message naming the file and the problem."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from countersign.approvals import ApprovalSettingsError, Verifier, load_settings
from countersign.testing.approval_issuer import AUD, ISS, KEYS
from countersign.testing.approvals import write_jwks

GOOD: dict[str, Any] = {"issuer": ISS, "audience": AUD, "jwks": "app.jwks.json"}


def write(work: Path, data: Any, name: str = "approvals.json") -> Path:
    path = work / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], r"-: must be a mapping with an 'issuers' list"),
        ({"issuers": []}, r"issuers: must be a non-empty list of issuers"),
        ({"issuers": [GOOD], "isuers": []}, r"-: unknown key\(s\) isuers"),
        ({"issuers": [{**GOOD, "algorithm": ["EdDSA"]}]}, r"issuers\[0\]: unknown key\(s\) algorithm"),
        ({"issuers": [{**GOOD, "audience": ""}]}, r"issuers\[0\]\.audience: is required"),
        ({"issuers": [{"issuer": ISS, "audience": AUD}]}, r"issuers\[0\]\.jwks: is required"),
        (
            {"issuers": [{**GOOD, "algorithms": ["EdDSA", "none"]}]},
            r"issuers\[0\] \(https://app.example\)\.algorithms: 'none' is never accepted",
        ),
        ({"issuers": [{**GOOD, "algorithms": ["RS1"]}]}, r"\.algorithms: unknown algorithm 'RS1'"),
        ({"issuers": [{**GOOD, "algorithms": []}]}, r"\.algorithms: must be a non-empty list"),
        (
            {"issuers": [{**GOOD, "jwks": "https://app.example/jwks.json", "algorithms": ["HS256"]}]},
            r"HMAC needs a shared secret, which is never fetched from a URL",
        ),
        (
            {"issuers": [{**GOOD, "jwks": "http://app.example/jwks.json"}]},
            r"\.jwks: must be https \(plain http only for 127.0.0.1 or localhost\)",
        ),
        (
            {"issuers": [{**GOOD, "jwks": "ftp://app.example/jwks.json"}]},
            r"\.jwks: must be a file path or an https URL",
        ),
        ({"issuers": [GOOD, GOOD]}, r"issuers\[1\]: issuer 'https://app.example' is listed twice"),
        ({"issuers": [{**GOOD, "max_ttl": 0}]}, r"\.max_ttl: must be a whole number of seconds from 1 to 86400"),
        ({"issuers": [{**GOOD, "max_ttl": "300"}]}, r"\.max_ttl: must be a whole number"),
        ({"issuers": [{**GOOD, "jwks_refetch_interval": -1}]}, r"\.jwks_refetch_interval: must be a number"),
        ({"issuers": [GOOD], "step_up": {"urgent": ["mfa"]}}, r"step_up: unknown risk 'urgent'"),
        ({"issuers": [GOOD], "step_up": {"high": []}}, r"step_up\.high: must be a non-empty list of acr values"),
        ({"issuers": [GOOD], "leeway": 3600}, r"leeway: must be a whole number of seconds from 0 to 300"),
        ('{"issuers": [], "issuers": []}', r"not valid: duplicate key 'issuers'"),
    ],
)
def test_a_bad_settings_file_is_refused_naming_file_and_problem(tmp_path: Path, data: Any, message: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(ApprovalSettingsError, match=message) as caught:
        load_settings(path)
    assert str(caught.value).startswith(f"approvals settings {path}: ")


def test_a_yaml_file_with_a_repeated_key_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "issuers:\n  - issuer: a\n    issuer: b\n", "approvals.yaml")
    with pytest.raises(ApprovalSettingsError, match="duplicate key 'issuer'"):
        load_settings(path)


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ApprovalSettingsError, match="cannot be read"):
        load_settings(tmp_path / "missing.yaml")


def test_a_yaml_file_with_defaults_reads_as_documented(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "issuers:\n"
        "  - issuer: https://app.example\n"
        "    audience: countersign\n"
        "    jwks: keys/app.jwks.json\n"
        "  - issuer: https://idp.example/\n"
        "    audience: https://api.example/countersign\n"
        "    jwks: https://idp.example/.well-known/jwks.json\n"
        "    algorithms: [RS256]\n"
        "    max_ttl: 600\n"
        "step_up: {high: [urn:example:acr:mfa]}\n",
        "approvals.yaml",
    )
    settings = load_settings(path)
    app, idp = settings.issuers
    assert app.jwks == str(tmp_path / "keys" / "app.jwks.json")  # relative to the settings file
    assert (app.algorithms, app.max_ttl, app.max_grant_ttl, app.context_aud) == (
        ("EdDSA", "ES256", "RS256"),
        300,
        604800,
        "countersign",
    )
    assert idp.jwks_is_url and idp.algorithms == ("RS256",) and idp.max_ttl == 600
    assert settings.step_up == {"high": frozenset({"urn:example:acr:mfa"})} and settings.leeway == 30


@pytest.mark.parametrize(
    ("jwks", "message"),
    [
        (None, r"issuer https://app.example: JWKS file .*app.jwks.json does not exist"),
        ("{", r"issuer https://app.example: JWKS file .*app.jwks.json: .*"),
        ({"keys": "k1"}, r'a JWKS must be a JSON object with a "keys" list'),
        ({"keys": [{"kid": "x"}]}, r"keys\[0\] must be a JSON object with a kty"),
        ({"keys": [{**KEYS["EdDSA"].public_jwk(), "kid": 7}]}, r"keys\[0\] \(kid 7\): kid must be a string"),
        ({"keys": [KEYS["EdDSA"].public_jwk()] * 2}, r"keys\[1\] \(kid 'eddsa-1'\): kid is listed twice"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "s"}]}, r"no key in the JWKS fits the algorithms"),
        ({"keys": [{**KEYS["EdDSA"].public_jwk(), "use": "enc"}]}, r"no key in the JWKS fits the algorithms"),
    ],
)
async def test_a_jwks_that_cannot_be_used_stops_the_start(tmp_path: Path, jwks: Any, message: str) -> None:
    if jwks is not None:
        write(tmp_path, jwks, "app.jwks.json")
    settings = write(tmp_path, {"issuers": [GOOD]})
    with pytest.raises(ApprovalSettingsError, match=message) as caught:
        await Verifier.load(settings)
    assert str(caught.value).startswith(f"approvals settings {settings}: issuer {ISS}: ")


async def test_a_short_hmac_secret_stops_the_start(tmp_path: Path) -> None:
    from countersign.testing.approvals import SigningKey

    short = SigningKey("short", "HS256", b"0123456789")
    write_jwks(tmp_path / "app.jwks.json", short)
    settings = write(tmp_path, {"issuers": [{**GOOD, "algorithms": ["HS256"]}]})
    with pytest.raises(ApprovalSettingsError, match="too weak for HS256"):
        await Verifier.load(settings)
