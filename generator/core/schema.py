"""The values contract: load `schemas/values.schema.json` and check documents against it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from generator.core.paths import ROOT

SCHEMA_PATH = ROOT / "schemas" / "values.schema.json"


@cache
def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@cache
def go_regexp(pattern: str) -> re.Pattern[str]:
    """`pattern` compiled to match as Go's regexp package (Helm's schema check) does.

    The one difference that matters for the schema's anchored patterns: in Go, `$` (without the
    m flag) matches only at the end of the text; in Python it also matches before a final newline,
    so "myrun\n" would pass `^[a-z]+$` here and fail in Helm. Every unescaped `$` outside a
    character class becomes `\\Z` (Python's end of text)."""
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            # a `]` right after `[` or `[^` is a literal member of the class
            j = i + 1
            if pattern[j : j + 1] == "^":
                j += 1
            if pattern[j : j + 1] == "]":
                out.append(pattern[i : j + 1])
                i = j + 1
                continue
        elif c == "$":
            out.append(r"\Z")
            i += 1
            continue
        out.append(c)
        i += 1
    return re.compile("".join(out))


def _go_pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not go_regexp(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


@cache
def validator_class() -> Any:
    """Draft 2020-12, with `pattern` matching as Helm's Go regexps do."""
    from jsonschema import Draft202012Validator, validators

    return validators.extend(Draft202012Validator, {"pattern": _go_pattern})


@cache
def _validator() -> Any:
    cls = validator_class()
    # The schema's own validity against the 2020-12 metaschema is a test (tests/values/test_schema.py):
    # checking it here cost every `validate` a third of a second.
    return cls(load_schema())


@dataclass(frozen=True)
class SchemaError:
    path: str  # dotted key path, e.g. workerGroups[0].replicas
    message: str
    fix: str = ""  # what to give instead, in the key's own words (its schema description)


VALUES_TABLE = "charts/nemo-rl-gke/README.md"  # the chart's values table, generated from this schema (also docs/values.md)


def dotted(parts: Any) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out or "(root)"


def key_path(document: Any, parts: Any) -> str:
    """Like `dotted`, but a number is shown as a list index only where the document has a list:
    `{1: a}` is the key 1, not the entry [1]."""
    out, node = "", document
    for p in parts:
        if isinstance(node, list) and isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            node = None
    return out or "(root)"


# Keys whose values may be credentials: their values are never quoted in a finding (findings go
# to terminals and CI logs).
SECRET_KEY_NAME = re.compile(r"token|secret|passw(or)?d|credential|api[-_]?key|private[-_]?key|access[-_]?key", re.I)
HIDDEN = "the value (not shown: it may be a credential)"


def is_secret(document: Any, parts: Any) -> bool:
    """Whether the value at `parts` may hold a credential: anything under `secrets`, any key whose
    name suggests one, or the value of an environment entry so named ({name: HF_TOKEN, value: ...})."""
    node = document
    for p in parts:
        if isinstance(p, str) and (p == "secrets" or SECRET_KEY_NAME.search(p)):
            return True
        if isinstance(node, dict) and p == "value" and SECRET_KEY_NAME.search(str(node.get("name", ""))):
            return True
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            node = None
    return False


def _own_description(error: Any) -> str:
    """What the failing key takes, in the schema's words, never its regular expression: the
    description of the key's own node (a property's own over its $ref's), else of the failing
    subschema (a $defs entry, a propertyNames rule); "" when the schema has none."""
    path = tuple(error.absolute_path)
    naming = "propertyNames" in error.schema_path  # the key's name failed, not its value
    own = "" if naming else (description(path) or "")
    schema = error.schema if isinstance(error.schema, dict) else {}
    form = schema.get("description") or ""
    text = own if not form or form in own else (f"{own.rstrip('.')}; {form}" if own else form)
    return " ".join(text.split())


def _fix(key: str, described: str) -> str:
    """The fix of a schema error: the key's own description, else where the values table is."""
    if described:
        return f"{key} takes: {described}"
    return f"see the values table in {VALUES_TABLE}"


def _describe(error: Any, document: Any = None) -> tuple[str, str, str]:
    """A short path, a one-line message and the fix for a jsonschema error."""
    path = list(error.absolute_path)

    def dotted(parts: Any) -> str:
        return key_path(document, parts)

    secret = is_secret(document, path)
    value = HIDDEN if secret else repr(error.instance)
    v = error.validator
    key = dotted(path)
    described = _own_description(error)
    if v == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})), key=str)
        if extra:
            allowed = ", ".join(sorted(error.schema.get("properties", {}))) or "none"
            name = extra[0]
            return (
                dotted([*path, name]),
                f"unknown key {name!r} (allowed here: {allowed})",
                f"remove {name!r} or spell it as one of the allowed keys (the values table in {VALUES_TABLE})",
            )
    if v == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return (
            dotted([*path, missing]),
            "required key is missing",
            f"add {dotted([*path, missing])} (see the values table in {VALUES_TABLE})",
        )
    if v == "enum":
        choices = ", ".join(map(str, error.validator_value))
        return key, f"{value} is not one of: {choices}", f"set {key} to one of: {choices}"
    if v == "type":
        got = type(error.instance).__name__
        return key, f"expected {error.validator_value}, got {got}" + ("" if secret else f" {value}"), _fix(key, described)
    if v == "pattern":
        what = "name" if "propertyNames" in error.schema_path else "value"
        return key, f"{value} is not a {what} {key} accepts", _fix(key, described)
    if v == "not":
        return key, f"{value} is not allowed here", _fix(key, described)
    if v in ("maxLength", "minLength") and isinstance(error.instance, str):
        size = len(error.instance)
        bound = "at most" if v == "maxLength" else "at least"
        return key, f"{size} characters; {bound} {error.validator_value} allowed", _fix(key, described)
    if secret:
        return key, f"fails the schema's {v} rule (the value is not shown: it may be a credential)", _fix(key, described)
    message = error.message.splitlines()[0]
    if len(message) > 200:
        message = message[:200] + "..."
    return key, message, _fix(key, described)


def _non_finite(node: Any, path: list[Any]) -> Iterator[SchemaError]:
    """YAML's .nan and .inf: JSON Schema's "number" lets them through (every comparison with NaN is
    false), but neither Helm's JSON nor Kubernetes has them."""
    if isinstance(node, float) and not math.isfinite(node):
        yield SchemaError(dotted(path), f"{node!r} is not a number Helm or Kubernetes accepts", "give a finite number")
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _non_finite(v, [*path, k])
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _non_finite(v, [*path, i])


# --- the plain check -----------------------------------------------------------------------
# jsonschema costs a `validate` and the generator 70-90 ms of imports (jsonschema, referencing,
# attrs, rpds, jsonschema_specifications) and builds a validator, only to find nothing on a valid
# document. `conforms` answers "valid?" for the keywords this schema uses, with jsonschema's
# Draft 2020-12 semantics (Python's types as jsonschema's default type checker maps them, `pattern`
# as Go matches it, `$ref` beside its siblings); jsonschema itself runs only when the answer is
# no, so findings and their messages are its own. A keyword it does not know makes it say no.
# tests/values/test_schema_conforms.py holds it to jsonschema over generated files and typical mistakes.

_ANNOTATIONS = frozenset({"description", "title", "default", "$schema", "$id", "$comment", "$defs", "examples"})


class _Unknown(Exception):
    """A keyword or form the plain check does not model: let jsonschema decide."""


def _is_type(instance: Any, name: str) -> bool:
    if name == "object":
        return isinstance(instance, dict)
    if name == "array":
        return isinstance(instance, list)
    if name == "string":
        return isinstance(instance, str)
    if name == "boolean":
        return isinstance(instance, bool)
    if name == "null":
        return instance is None
    if isinstance(instance, bool):
        return False
    if name == "integer":
        return isinstance(instance, int) or (isinstance(instance, float) and instance.is_integer())
    if name == "number":
        return isinstance(instance, int | float)
    raise _Unknown(name)


def _scalar_equal(a: Any, b: Any) -> bool:
    """jsonschema's `equal` for scalars: a bool equals only a bool; lists and mappings are not modelled."""
    for x in (a, b):
        if isinstance(x, dict | list):
            raise _Unknown("enum of containers")
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return bool(a == b)


def _conforms(instance: Any, schema: Any) -> bool:
    if schema is True:
        return True
    if schema is False:
        return False
    if not isinstance(schema, dict):
        raise _Unknown("schema")
    for keyword, value in schema.items():
        if keyword in _ANNOTATIONS or keyword in ("properties", "additionalProperties"):
            continue
        if keyword == "$ref":
            if not isinstance(value, str) or not value.startswith("#/"):
                raise _Unknown(value)
            target: Any = load_schema()
            for part in value[2:].split("/"):
                target = target[part]
            ok = _conforms(instance, target)
        elif keyword == "type":
            ok = any(_is_type(instance, t) for t in ([value] if isinstance(value, str) else value))
        elif keyword == "enum":
            ok = any(_scalar_equal(instance, e) for e in value)
        elif keyword == "const":
            ok = _scalar_equal(instance, value)
        elif keyword == "pattern":
            ok = not isinstance(instance, str) or go_regexp(value).search(instance) is not None
        elif keyword == "maxLength":
            ok = not isinstance(instance, str) or len(instance) <= value
        elif keyword == "minLength":
            ok = not isinstance(instance, str) or len(instance) >= value
        elif keyword == "minimum":
            ok = not (_is_type(instance, "number") and instance < value)
        elif keyword == "maximum":
            ok = not (_is_type(instance, "number") and instance > value)
        elif keyword == "required":
            ok = not isinstance(instance, dict) or all(k in instance for k in value)
        elif keyword == "items":
            ok = not isinstance(instance, list) or all(_conforms(v, value) for v in instance)
        elif keyword == "minItems":
            ok = not isinstance(instance, list) or len(instance) >= value
        elif keyword == "maxItems":
            ok = not isinstance(instance, list) or len(instance) <= value
        elif keyword == "propertyNames":
            ok = not isinstance(instance, dict) or all(_conforms(k, value) for k in instance)
        elif keyword == "anyOf":
            ok = any(_conforms(instance, s) for s in value)
        elif keyword == "not":
            ok = not _conforms(instance, value)
        else:
            raise _Unknown(keyword)
        if not ok:
            return False
    if isinstance(instance, dict) and ("properties" in schema or "additionalProperties" in schema):
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for k, v in instance.items():
            if not _conforms(v, props.get(k, extra)):
                return False
    return True


def conforms(document: Any) -> bool:
    """Whether jsonschema finds nothing wrong with `document` (False also when unsure)."""
    try:
        return _conforms(document, load_schema())
    except (_Unknown, RecursionError):
        return False


def iter_errors(document: Any) -> Iterator[SchemaError]:
    if not conforms(document):  # jsonschema only for a document with something to report
        errors = sorted(_validator().iter_errors(document), key=lambda e: (list(map(str, e.absolute_path)), e.validator))
        for e in errors:
            yield SchemaError(*_describe(e, document))
    yield from _non_finite(document, [])


def description(path: tuple[str | int, ...]) -> str | None:
    """The schema description of the key at `path` (list indices as ints), or None."""
    node: dict[str, Any] | None = load_schema()
    for part in path:
        if node is None:
            return None
        node = resolve_ref(node)
        node = node.get("items") if isinstance(part, int) else node.get("properties", {}).get(part)
    if node is None:
        return None
    return node.get("description") or resolve_ref(node).get("description")


def resolve_ref(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"only local $ref supported, got {ref}")
        target: Any = load_schema()
        for part in ref[2:].split("/"):
            target = target[part]
        merged = dict(target)
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        node = merged
    return node
