"""The keys Databricks documents for a bundle's configuration, where a ``databricks.yml`` uses them.

The Databricks CLI publishes the JSON schema of ``databricks.yml`` (databricks/cli,
``bundle/schema/jsonschema.json``: every mapping's keys, from the CLI's own configuration types
and the Jobs API's; its descriptions are Databricks' documentation of each key).  The schema
is 0.9 MB; what a test of one bundle needs is, for each mapping the bundle writes, the keys
Databricks allows there (and, for a value of a fixed set, the values).  ``keys_for`` walks the
bundle and the schema together and keeps exactly that, under a path pattern: keys joined by
``.``, ``*`` for an entry of a map of names (``resources.jobs.*``), ``[]`` for an item of a
list (``...tasks[]``).

    python -m tests.support.bundle_schema SCHEMA.json deploy/databricks/databricks.yml COMMIT > \\
        tests/docs/databricks_bundle_keys.json

``check`` walks a bundle against such a table: a key Databricks does not document, a required
key missing, a value outside a documented set, or a mapping the table has no entry for (the
bundle grew: make the table again from the schema) is a finding.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

#: a ``${...}`` reference (a variable, a workspace path): resolved by the CLI, not checked here
REFERENCE = re.compile(r"\$\{[^}]+\}")


def _resolve(schema: dict, ref: str) -> dict:
    """The definition ``ref`` names (``#/$defs/github.com/.../config.Artifact``: the names of
    ``$defs`` contain slashes, so the longest name that exists is taken at each step)."""
    parts = ref.removeprefix("#/$defs/").split("/")
    node: Any = schema["$defs"]
    i = 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            name = "/".join(parts[i:j])
            if isinstance(node, dict) and name in node:
                node, i = node[name], j
                break
        else:
            raise KeyError(f"{ref}: no definition")
    return node


def _shape(schema: dict, node: dict) -> dict:
    """``node`` with its ``$ref`` followed and, of a ``oneOf``, the branch that is not the
    ``${var...}`` string every definition also allows."""
    while True:
        if "$ref" in node:
            node = _resolve(schema, node["$ref"])
        elif "oneOf" in node:
            branches = [b for b in node["oneOf"] if "pattern" not in b]
            node = branches[0] if branches else node["oneOf"][0]
        else:
            return node


def keys_for(schema: dict, document: Any) -> dict[str, dict]:
    """For each mapping (and each value of a documented set) ``document`` holds, what the
    schema allows there: ``{"keys": [...], "required": [...]}`` for an object, ``{"map": true}`` for a map of
    names, ``{"enum": [...]}`` for a value of a fixed set; by path pattern (module docstring)."""
    table: dict[str, dict] = {}

    def walk(node: dict, value: Any, path: str) -> None:
        shape = _shape(schema, node)
        if isinstance(value, dict):
            if "properties" in shape:
                table[path] = {"keys": sorted(shape["properties"]), "required": shape.get("required", [])}
                for key, item in value.items():
                    if key in shape["properties"]:
                        walk(shape["properties"][key], item, f"{path}.{key}" if path else key)
            elif isinstance(shape.get("additionalProperties"), dict):
                table[path] = {"map": True}
                for item in value.values():
                    walk(shape["additionalProperties"], item, f"{path}.*")
        elif isinstance(value, list) and "items" in shape:
            for item in value:
                walk(shape["items"], item, f"{path}[]")
        elif "enum" in shape:
            table[path] = {"enum": list(shape["enum"])}

    walk({"properties": schema["properties"]}, document, "")
    return table


def check(table: dict[str, dict], document: Any) -> list[str]:
    """What in ``document`` the ``table`` (``keys_for``) does not allow, one line each."""
    findings: list[str] = []

    def walk(value: Any, path: str) -> None:
        allowed = table.get(path)
        if isinstance(value, dict):
            if allowed is None:
                findings.append(f"{path or '(top)'}: no key list for this mapping; make the table again")
            elif "map" in allowed:
                for item in value.values():
                    walk(item, f"{path}.*")
            else:
                for key in allowed.get("required", []):
                    if key not in value:
                        findings.append(f"{path or '(top)'}: {key!r} is required here")
                for key, item in value.items():
                    if key not in allowed.get("keys", []):
                        findings.append(f"{path or '(top)'}: {key!r} is not a key Databricks documents here")
                    else:
                        walk(item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            for item in value:
                walk(item, f"{path}[]")
        elif allowed and "enum" in allowed and not REFERENCE.fullmatch(str(value)):
            if value not in allowed["enum"]:
                findings.append(f"{path}: {value!r} is not one of {allowed['enum']}")

    walk(document, "")
    return findings


def main(argv: list[str]) -> int:
    import yaml

    schema_path, bundle_path, commit = argv
    with open(schema_path, encoding="utf-8") as f:
        schema = json.load(f)
    with open(bundle_path, encoding="utf-8") as f:
        document = yaml.safe_load(f)
    source = {
        "repository": "databricks/cli",
        "path": "bundle/schema/jsonschema.json",
        "commit": commit,
    }
    print(json.dumps({"source": source, "keys": keys_for(schema, document)}, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
