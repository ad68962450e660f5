"""`countersign registry check FILE...`: the registry rules of a sidecar's start, run in CI before a deploy.

A FILE is a registry, or a stream of Kubernetes manifests (``helm template ... | countersign registry check -``)
whose ConfigMaps carrying ``registry.yaml`` are each checked, named ``FILE: ConfigMap/<name>``. The answer is
the sidecar's own: ``<file>: tool '<name>': <rule>: <detail>`` on standard error, exit 1; exit 0 when every
registry passes; exit 2 when a FILE holds no registry at all, or the ``--approvals`` file is invalid.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

import yaml

from countersign import registry as registry_mod
from countersign.approvals import ApprovalSettingsError, load_settings
from countersign.errors import RegistryError


def _registries(name: str, raw: bytes) -> list[tuple[str, bytes | str]] | None:
    """(label, YAML text) of each registry in one file: itself, or its manifests' ConfigMaps; None if neither."""
    try:
        docs = [d for d in yaml.safe_load_all(raw) if d is not None]
    except yaml.YAMLError:
        return [(name, raw)]  # not YAML: the registry loader names the error
    if not docs or not all(isinstance(d, dict) and "apiVersion" in d and "kind" in d for d in docs):
        return [(name, raw)]  # a registry (one mapping without apiVersion/kind)
    found: list[tuple[str, bytes | str]] = []
    for doc in docs:
        data: Any = doc.get("data") or {}
        if doc["kind"] == "ConfigMap" and isinstance(data, dict) and isinstance(data.get("registry.yaml"), str):
            found.append((f"{name}: ConfigMap/{(doc.get('metadata') or {}).get('name', '?')}", data["registry.yaml"]))
    return found or None


def check(
    paths: list[str], stdin: Any = None, out: TextIO = sys.stdout, err: TextIO = sys.stderr, *, approvals: str = ""
) -> int:
    """Exit status of the check; ``approvals`` is the sidecars' --approvals file, whose issuers decide approval's
    default and whether ``approval: signed`` may be declared (its keys are not loaded here: no network in CI)."""
    issuers = False
    if approvals:
        try:
            issuers = bool(load_settings(approvals).issuers)
        except ApprovalSettingsError as exc:
            print(exc, file=err)
            return 2
    worst = 0
    for path in paths:
        if path == "-":
            raw = (stdin or sys.stdin.buffer).read()
            name = "<stdin>"
        else:
            try:
                with open(path, "rb") as fh:
                    raw = fh.read()
            except OSError as exc:
                print(RegistryError(path, "-", "readable", str(exc)), file=err)
                worst = max(worst, 1)
                continue
            name = path
        registries = _registries(name, raw)
        if registries is None:
            print(
                f"{name}: no registry: neither a registry file nor manifests with a ConfigMap holding registry.yaml",
                file=err,
            )
            worst = max(worst, 2)
            continue
        for label, text in registries:
            try:
                registry = registry_mod.loads(text, label, issuers=issuers)
            except RegistryError as exc:
                print(exc, file=err)
                worst = max(worst, 1)
                continue
            print(
                f"{label}: ok: policy_version {registry.policy_version}, {len(registry.tools)} tool(s), "
                f"{len(registry.capabilities)} capability(ies)",
                file=out,
            )
    return worst
