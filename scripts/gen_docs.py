"""The documentation's reference pages, generated from the code so they cannot drift from it.

- ``reference/configuration.md``: every key of the typed configuration (:class:`strait.config.StraitConfig`)
  with its type, default, constraints, environment variable and description (the field's
  ``description``, else the comment above the field, else the key's comment in the YAML example
  of its class's or module's docstring);
- ``reference/cli.md``: every ``strait`` command and option, from the Typer app's click commands;
- ``reference/rest-api.md`` and ``reference/openapi.json``: the controller's HTTP API, from the
  OpenAPI document of the FastAPI application a controller serves;
- ``reference/metrics.md``: every Prometheus metric family Strait defines (read from the code of
  ``src/strait``: the metric family constructors with their name, help text and labels);
- ``reference/acls.md``: the ACLs of each role (:func:`strait.security.acls.markdown`);
- ``results/benchmarks.md`` and ``results/reliability.md``: BENCHMARKS.md and RELIABILITY.md.

MkDocs runs this module as a hook (``hooks:`` in mkdocs.yml): the pages are made at build time and
never committed. ``python scripts/gen_docs.py --out DIR`` writes them to DIR to read them alone.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
ENV_PREFIX = "STRAIT_"


# --- configuration -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    """One configuration key as the reference shows it."""

    path: str
    type: str
    default: str
    constraints: str
    env: str
    description: str


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]"
    if annotation is type(None):
        return "null"
    if inspect.isclass(annotation) and _is_model(annotation):
        return "section"
    return getattr(annotation, "__name__", str(annotation)).replace("typing.", "")


def _is_model(annotation: Any) -> bool:
    from pydantic import BaseModel

    return inspect.isclass(annotation) and issubclass(annotation, BaseModel)


def _model_in(annotation: Any) -> Any:
    """The pydantic model a field holds directly or optionally (``X``, ``X | None``), else None."""
    if _is_model(annotation):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [a for a in typing.get_args(annotation) if _is_model(a)]
        return models[0] if len(models) == 1 else None
    return None


def _list_model(annotation: Any) -> Any:
    """The model of a ``list[X]`` (or ``list[X] | None``) field, else None."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(candidate) is list:
            (item,) = typing.get_args(candidate)
            if _is_model(item):
                return item
    return None


def _constraints(field: Any) -> str:
    words = {"gt": ">", "ge": "≥", "lt": "<", "le": "≤", "min_length": "length ≥", "max_length": "length ≤"}
    found = []
    for item in field.metadata:
        for attribute, word in words.items():
            value = getattr(item, attribute, None)
            if value is not None:
                found.append(f"{word} {value}" + (""))
    return ", ".join(found)


def _default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default
    if value is PydanticUndefined:
        return "required"
    if _is_model(type(value)):
        return "(section)"
    if isinstance(value, Path):
        value = str(value)
    return json.dumps(value)


def _comments_above(cls: type) -> dict[str, str]:
    """The comment lines right above each field in the class body, joined."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = re.match(r"^    (\w+)\s*:", line)
        if match and pending:
            found[match.group(1)] = " ".join(pending)
        pending = []
    return found


def _docstring_comments(*docs: str | None) -> dict[str, str]:
    """``key: value  # comment`` lines (and their indented comment continuations) of YAML examples."""
    found: dict[str, str] = {}
    for doc in docs:
        key = None
        for line in (doc or "").splitlines():
            match = re.match(r"^\s*([\w.]+):[^#]*#\s?(.*)$", line)
            if match:
                key = match.group(1)
                found.setdefault(key, match.group(2).strip())
                continue
            continued = re.match(r"^\s+#\s?(.*)$", line)
            if continued and key is not None and found.get(key) is not None:
                found[key] = f"{found[key]} {continued.group(1).strip()}"
                continue
            key = None
    return found


def code_description(model: Any, name: str) -> str:
    """What the code says of a field: its ``description``, the comment above it, or its comment in
    a YAML example of its class's or module's docstring."""
    field = model.model_fields[name]
    key = field.alias or name
    if field.description:
        return str(field.description)
    above = _comments_above(model)
    examples = _docstring_comments(model.__doc__, inspect.getmodule(model).__doc__)
    return above.get(name) or examples.get(key, "")


def config_models() -> list[Any]:
    """Every model class of the configuration, the root first."""
    from strait.config import StraitConfig

    found: list[Any] = []

    def walk(model: Any) -> None:
        if model in found:
            return
        found.append(model)
        for field in model.model_fields.values():
            for nested in (_model_in(field.annotation), _list_model(field.annotation)):
                if nested is not None:
                    walk(nested)

    walk(StraitConfig)
    return found


def config_keys() -> list[Key]:
    """Every key of the configuration file, depth first, in the model's order."""
    from strait.config import StraitConfig

    keys: list[Key] = []

    def walk(model: Any, prefix: str, env: str | None, env_note: str) -> None:
        for name, field in model.model_fields.items():
            key = field.alias or name
            path = f"{prefix}{key}"
            annotation = field.annotation
            own_env = None if env is None else f"{env}{key.upper()}" if env == ENV_PREFIX else f"{env}__{key.upper()}"
            description = code_description(model, name)
            shown_env = f"`{own_env}`" if own_env is not None else env_note
            nested = _model_in(annotation)
            items = _list_model(annotation)
            if nested is not None:
                doc = inspect.cleandoc(nested.__doc__ or "")
                keys.append(Key(path, "section", _default(field), "", "", description or doc))
                walk(nested, f"{path}.", own_env, env_note)
            elif items is not None:
                keys.append(
                    Key(
                        path,
                        f"list of `{path}[]` entries",
                        _default(field),
                        _constraints(field),
                        shown_env,
                        description,
                    )
                )
                note = f"in `{own_env}` (the whole list, as JSON)" if own_env else env_note
                walk(items, f"{path}[].", None, note)
            else:
                if typing.get_origin(annotation) is dict and own_env is not None:
                    shown_env = f"`{own_env}__<KEY>`, or `{own_env}` as JSON"
                keys.append(
                    Key(path, _type_name(annotation), _default(field), _constraints(field), shown_env, description)
                )

    walk(StraitConfig, "", ENV_PREFIX, "")
    return keys


def _text(text: str) -> str:
    """Prose from the code as Markdown: `<...>` outside code spans kept as text (Markdown would
    take `<prefix>` for an HTML tag)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return _text(text.replace("|", "\\|").replace("\n", " "))


def configuration_page() -> str:
    import strait.config

    out = [
        "# Configuration reference",
        "",
        "Generated from `strait.config.StraitConfig`. One YAML file configures every controller and",
        "worker. Unknown keys are refused at load, naming the key. Environment variables override",
        "the file: `STRAIT_` then the path in upper case with `__` between levels",
        "(`STRAIT_ZOOKEEPER__CONNECT=zk:2181`); `null` unsets an optional key. Text values may",
        "reference secrets, `${env:NAME}` or `${file:/path}`, resolved once at load and masked in logs.",
        "",
        "Keys of list entries (`routes[]`) have no variable of their own: `STRAIT_ROUTES` replaces",
        "the whole list, as JSON. Cluster properties (`clusters.<name>.<property>`) are librdkafka's",
        "client properties, passed to every client Strait makes for that cluster.",
        "",
        _module_doc(strait.config),
    ]
    keys = config_keys()
    sections: dict[str, list[Key]] = {}
    for key in keys:
        top = key.path.split(".")[0].split("[")[0]
        sections.setdefault(top, []).append(key)
    for top, members in sections.items():
        out += ["", f"## `{top}`", ""]
        out += ["| key | type | default | environment | description |", "| --- | --- | --- | --- | --- |"]
        for key in members:
            kind = key.type + (f" ({key.constraints})" if key.constraints else "")
            out.append(
                f'| <span id="{_anchor(key.path)}"></span>`{key.path}` | {_cell(kind)} | `{_cell(key.default)}` | '
                f"{_cell(key.env)} | {_cell(key.description)} |"
            )
    return "\n".join(out) + "\n"


def _anchor(path: str) -> str:
    return "key-" + re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def _module_doc(module: types.ModuleType) -> str:
    doc = inspect.cleandoc(module.__doc__ or "")
    paragraphs = doc.split("\n\n")
    return "\n\n".join(paragraphs[1:2]) if len(paragraphs) > 1 else ""


# --- command line ------------------------------------------------------------------------------


def _context(command: Any, path: str = "strait") -> Any:
    # Typer builds its commands on its own copy of click: make contexts with the command's class.
    return command.context_class(command, info_name=path)


def _is_group(command: Any) -> bool:
    return hasattr(command, "list_commands")


def cli_commands() -> list[tuple[str, Any]]:
    """Every ``strait`` command (groups included) with its click command, depth first."""
    import typer

    from strait.cli.main import app

    found: list[tuple[str, Any]] = []

    def walk(command: Any, path: str) -> None:
        found.append((path, command))
        if _is_group(command):
            ctx = _context(command, path)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "strait")
    return found


def _help_text(command: Any) -> str:
    text = inspect.cleandoc(command.help or "")
    return _text(text.replace("\b\n", "").strip())


def _default_shown(param: Any) -> str:
    default = param.default
    if default is None or callable(default) or default in ((), []):
        return ""
    if getattr(param, "is_flag", False) and default is False:
        return ""
    return f"`{default}`"


def cli_page() -> str:
    out = [
        "# Command-line reference",
        "",
        "Generated from the `strait` command's own definitions (`strait.cli`); `strait COMMAND --help`",
        "prints the same.",
    ]
    for path, command in cli_commands():
        depth = min(path.count(" ") + 1, 4)
        ctx = _context(command, path)
        usage = " ".join([path, *command.collect_usage_pieces(ctx)])
        out += ["", f"{'#' * (depth + 1)} `{path}`", "", _help_text(command), "", "```", usage, "```"]
        rows = []
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "argument":
                names = param.name.upper()
            else:
                names = ", ".join([*param.opts, *param.secondary_opts])
            kind = param.display_type(ctx).strip("<>")
            help_text = getattr(param, "help", None) or ""
            rows.append(f"| `{_cell(names)}` | {_cell(kind)} | {_cell(_default_shown(param))} | {_cell(help_text)} |")
        if rows:
            out += ["", "| argument or option | type | default | description |", "| --- | --- | --- | --- |", *rows]
        if _is_group(command):
            subs = command.list_commands(ctx)
            out += ["", "Commands: " + ", ".join(f"`{path} {s}`" for s in subs) + "."]
    return "\n".join(out) + "\n"


# --- REST API ----------------------------------------------------------------------------------


def controller_app() -> Any:
    """The application a controller serves (`strait.controller.server`), over stand-ins for its services."""
    from fastapi import FastAPI

    from strait.config import parse_config
    from strait.web.app import create_app
    from strait.web.balance import mount_balance_watch
    from strait.web.dashboard import mount_observability

    config = parse_config(
        {
            "clusters": {"src": {"bootstrap.servers": "127.0.0.1:9092"}},
            "routes": [{"name": "r", "source": "src", "destination": "src"}],
        },
        {},
    )
    service: Any = types.SimpleNamespace(config=config)
    app: FastAPI = create_app(service, api_token=None)
    mount_balance_watch(app, None)
    observatory: Any = types.SimpleNamespace()
    mount_observability(app, observatory)
    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the application a controller serves."""
    document: dict[str, Any] = controller_app().openapi()
    return document


def route_docs(app: Any) -> dict[tuple[str, str], tuple[str, bool]]:
    """Every route the application serves: (method, path) -> (what it does, whether the OpenAPI
    document lists it). What it does is the handler's docstring, else the line of its module's
    docstring that names it (``- `GET /ui`: ...``)."""
    found: dict[tuple[str, str], tuple[str, bool]] = {}
    routes = list(app.routes)
    for route in routes:
        included = getattr(route, "original_router", None)  # a router the app includes
        if included is not None:
            routes += included.routes
            continue
        methods = getattr(route, "methods", None)
        if methods is None or route.path in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"):
            continue
        for method in sorted(methods - {"HEAD"}):
            doc = route.endpoint.__doc__ or _module_line(route.endpoint, f"`{method} {route.path}`")
            doc = inspect.cleandoc(doc)
            found[(method, route.path)] = (doc[:1].upper() + doc[1:], getattr(route, "include_in_schema", True))
    return found


def _module_line(function: Any, mark: str) -> str:
    """What the docstring of ``function``'s module says after ``mark`` (``- `GET /ui`: ...``)."""
    for line in (inspect.getmodule(function).__doc__ or "").splitlines():
        if mark in line:
            rest = line.split(mark, 1)[1]
            return re.sub(r"^(\s*,\s*`[^`]*`)*\s*:?\s*", "", rest).strip()
    return ""


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    if "anyOf" in schema:
        return " | ".join(_schema_name(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    return str(schema.get("type", "any"))


def rest_page(document: dict[str, Any], routes: dict[tuple[str, str], tuple[str, bool]]) -> str:
    out = [
        "# REST API reference",
        "",
        "Generated from the OpenAPI document of the controller's application (`strait.web`); every",
        "controller serves it at `/openapi.json`, with an interactive view at `/docs`. The document",
        "itself: [openapi.json](openapi.json).",
        "",
        'Errors are JSON, `{"error": "<message naming the problem>"}`. With `controller.api_token`',
        "set, every call that changes something needs `Authorization: Bearer <token>`; with",
        "`observability.metrics_token` set, `/metrics` and `/metrics/targets` need that token instead.",
    ]
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            out += ["", f"## `{method.upper()} {path}`", ""]
            text = operation.get("description") or routes.get((method.upper(), path), ("", True))[0]
            if text:
                out += [inspect.cleandoc(text), ""]
            params = operation.get("parameters", [])
            if params:
                out += ["| parameter | in | type | required |", "| --- | --- | --- | --- |"]
                for param in params:
                    out.append(
                        f"| `{param['name']}` | {param['in']} | {_cell(_schema_name(param.get('schema', {})))} | "
                        f"{'yes' if param.get('required') else 'no'} |"
                    )
                out.append("")
            body = operation.get("requestBody")
            if body:
                media: dict[str, Any] = next(iter(body.get("content", {}).values()), {})
                schema = media.get("schema", {})
                out += [f"Body: `{_cell(_schema_name(schema))}`" + (" (required)" if body.get("required") else ""), ""]
            codes = ", ".join(
                f"{code} {answer.get('description', '')}"
                for code, answer in operation["responses"].items()
                if code != "422"  # the application answers invalid input with 400 and its error shape
            )
            out.append(f"Answers: {codes}; 400 when the input is invalid.")
    unlisted = [(key, doc) for key, (doc, listed) in routes.items() if not listed]
    if unlisted:
        out += [
            "",
            "## Outside the OpenAPI document",
            "",
            "Served by every controller, not described in `/openapi.json`.",
        ]
        for (method, path), doc in unlisted:
            out += ["", f"### `{method} {path}`", ""] + ([doc] if doc else [])
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        out += ["", "## Schemas"]
        for name, schema in schemas.items():
            out += ["", f"### `{name}`", ""]
            if schema.get("description"):
                out += [schema["description"], ""]
            props = schema.get("properties", {})
            if props:
                out += ["| field | type |", "| --- | --- |"]
                out += [f"| `{field}` | {_cell(_schema_name(spec))} |" for field, spec in props.items()]
    return "\n".join(out) + "\n"


# --- metrics -----------------------------------------------------------------------------------

_FAMILIES = {
    "GaugeMetricFamily": "gauge",
    "CounterMetricFamily": "counter",
    "HistogramMetricFamily": "histogram",
    "SummaryMetricFamily": "summary",
    "InfoMetricFamily": "info",
    "Gauge": "gauge",
    "Counter": "counter",
    "Histogram": "histogram",
    "Summary": "summary",
    "Info": "info",
}


@dataclass(frozen=True)
class Metric:
    """One metric family as Strait exposes it."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    module: str

    @property
    def exposed(self) -> str:
        return f"{self.name}_total" if self.kind == "counter" else self.name


def metrics() -> list[Metric]:
    """Every metric family constructed in ``src/strait`` with a literal ``strait_`` name (the
    benchmarks' own modules excepted), sorted by name."""
    found: dict[str, Metric] = {}
    for path in sorted((SRC / "strait").rglob("*.py")):
        module = ".".join(path.relative_to(SRC).with_suffix("").parts)
        if module.startswith(("strait.bench", "strait.sandbox")):
            continue
        for call in _calls(ast.parse(path.read_text())):
            metric = _metric(call, module)
            if metric is not None:
                found.setdefault(metric.name, metric)
    return sorted(found.values(), key=lambda m: m.name)


def _calls(tree: ast.AST) -> Iterator[ast.Call]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in _FAMILIES:
                yield node


def _metric(call: ast.Call, module: str) -> Metric | None:
    func = call.func
    kind = _FAMILIES[func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")]
    args = list(call.args)
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    name_node = args[0] if args else keywords.get("name")
    if not (isinstance(name_node, ast.Constant) and isinstance(name_node.value, str)):
        return None
    if not name_node.value.startswith("strait_"):
        return None
    help_node = args[1] if len(args) > 1 else keywords.get("documentation")
    help_text = _literal_text(help_node)
    labels_node = args[2] if len(args) > 2 else keywords.get("labels") or keywords.get("labelnames")
    labels = _labels(labels_node, module)
    return Metric(name_node.value, kind, help_text, labels, module)


def _literal_text(node: ast.AST | None) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "…" for v in node.values)
    return ast.unparse(node)


def _labels(node: ast.AST | None, module: str) -> tuple[str, ...]:
    if not isinstance(node, ast.expr):
        return ()
    namespace = vars(importlib.import_module(module))
    value = eval(compile(ast.Expression(node), module, "eval"), dict(namespace))  # names of the module only
    return tuple(str(v) for v in value)


def metrics_page() -> str:
    out = [
        "# Metrics reference",
        "",
        "Generated from the metric definitions in Strait's code. Controllers serve theirs at",
        "`/metrics` next to the REST API; each worker serves its own at",
        "`observability.worker_metrics_listen`, listed for Prometheus service discovery at the",
        "controller's `/metrics/targets`. Counters are exposed with the suffix `_total`, histograms as",
        "`_bucket`, `_sum` and `_count`.",
        "",
        "| metric | type | labels | served by | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for metric in metrics():
        served = "worker" if metric.module.endswith(".worker") or ".worker." in metric.module else "controller"
        labels = ", ".join(f"`{label}`" for label in metric.labels)
        out.append(
            f'| <span id="{metric.name}"></span>`{metric.exposed}` | {metric.kind} | {labels} | {served} '
            f"(`{metric.module}`) | {_cell(metric.help)} |"
        )
    return "\n".join(out) + "\n"


# --- ACLs --------------------------------------------------------------------------------------


def acls_page() -> str:
    from strait.security import acls

    return "\n".join(
        [
            "# ACLs reference",
            "",
            "Generated from `strait.security.acls`: exactly the permissions each role needs, the ones the",
            "sandbox grants and the secured integration tests run with. Topic permissions use `*` because",
            "which topics a route copies is decided at run time; every name Strait makes itself is",
            "matched by prefix.",
            "",
            "\n".join(_text(line) for line in acls.markdown().splitlines()),
        ]
    )


# --- results -----------------------------------------------------------------------------------


def results_page(name: str) -> str:
    """A results file of the repository's root, its links to ``bench/results/`` pointing into the site."""
    text = (ROOT / name).read_text()
    return re.sub(r"\]\((?:\./)?bench/results/", "](../bench-results/", text)


def linked_results(text: str) -> list[str]:
    """The files under ``bench/results/`` a results page links to."""
    return sorted(set(re.findall(r"\]\(\.\./bench-results/([^)#\s]+)\)", text)))


# --- all pages ---------------------------------------------------------------------------------


def pages() -> dict[str, str | bytes]:
    """Every generated file of the site, by its path under docs/."""
    app = controller_app()
    document = app.openapi()
    out: dict[str, str | bytes] = {
        "reference/configuration.md": configuration_page(),
        "reference/cli.md": cli_page(),
        "reference/rest-api.md": rest_page(document, route_docs(app)),
        "reference/openapi.json": json.dumps(document, indent=2) + "\n",
        "reference/metrics.md": metrics_page(),
        "reference/acls.md": acls_page(),
    }
    for source, target in (("BENCHMARKS.md", "results/benchmarks.md"), ("RELIABILITY.md", "results/reliability.md")):
        text = results_page(source)
        out[target] = text
        for linked in linked_results(text):
            file = ROOT / "bench" / "results" / linked
            if file.is_file():
                out[f"bench-results/{linked}"] = file.read_bytes()
    return out


def on_files(files: Any, config: Any) -> Any:
    """MkDocs hook: add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, content in pages().items():
        files.append(File.generated(config, path, content=content))
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the generated pages to")
    options = parser.parse_args()
    for path, content in pages().items():
        target = options.out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
        print(target)


if __name__ == "__main__":
    main()
