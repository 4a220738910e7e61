"""The `ckl` command line, and the composition root: `ckl serve` builds the runtime, its queue's job function
and the app. Heavy imports happen inside each command so `ckl --help` is instant."""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from core.keys import binding_refusal

if TYPE_CHECKING:
    from core.settings import Settings

DEFAULT_URL = "http://127.0.0.1:8000"


def settings_from(args: argparse.Namespace) -> Settings:
    """Settings from the environment, overridden by the flags the command was given."""
    from core.settings import Settings

    flags = ("data_dir", "host", "port", "model", "redis_url")
    return Settings(**{k: v for k in flags if (v := getattr(args, k, None)) is not None})


def cmd_keys(args: argparse.Namespace) -> None:
    from pydantic import ValidationError

    from core.keys import SCOPES, KeyConfig, hash_key, new_key

    try:
        entry = KeyConfig(name=args.name, sha256="0" * 64, scopes=args.scopes.split(","),  # checks every field
                          namespace=args.namespace)
    except ValidationError as exc:
        sys.exit(f"ckl keys: {exc.errors()[0]['msg']}")
    if "teach" in entry.scopes and entry.namespace is None and not args.shared:
        sys.exit("ckl keys: a teach key without --namespace teaches the shared namespace, which every key's prompts "
                 "reach: give a tenant's --namespace NAME, or --shared to mean it")
    key = new_key()
    entry.sha256 = hash_key(key)
    print(f"key (give it to the client; it is not stored): {key}")
    print(f"add to CKL_API_KEYS (a JSON list; scopes: {', '.join(SCOPES)}):")
    print(json.dumps(entry.model_dump(exclude_none=True)))


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from core import logs
    from core.queue import without_password
    from service.app import create_app
    from serving.runtime import Runtime
    from workers import job
    from workers.preview import AutoProbePreview

    settings = settings_from(args)
    logs.configure(settings.log_format)
    if refusal := binding_refusal(settings):
        sys.exit(f"ckl serve: {refusal}")
    if not settings.api_keys:
        print("ckl-serve: no API keys configured: every request is allowed (loopback only)", flush=True)
    mode = f"RQ on {without_password(settings.redis_url)}" if settings.redis_url else "embedded worker (no Redis)"
    print(f"ckl-serve on http://{settings.host}:{settings.port}  data: {settings.data_dir}  model: {settings.model}  "
          f"learning: {mode}", flush=True)
    # Both queues run (or name) the same job function; the preview makes auto-probes as the learner will. The
    # embedded learner prepares before its first job (a `ckl worker` prepares at its first).
    runtime = Runtime.create(settings, job.learn_document, preview=AutoProbePreview(settings), warm=job.warm_learner)
    # The embedded queue's learner is built with these: it yields to this process's decoding and learns on the
    # served weights (a `ckl worker` takes its own settings, loads its own model and decodes nothing).
    job.configure(settings, busy=lambda *within_s: runtime.decoding(*within_s), loaded=lambda: runtime.learner_model)
    # log_config=None: uvicorn's own messages go through the handler logs.configure installed.
    uvicorn.run(create_app(runtime), host=settings.host, port=settings.port, log_level="warning", log_config=None)


def cmd_worker(args: argparse.Namespace) -> None:
    from core.queue import without_password
    from workers.job import run_worker

    settings = settings_from(args)
    if not settings.redis_url:
        sys.exit("ckl worker needs Redis: set CKL_REDIS_URL or pass --redis-url")
    print(f"ckl worker: loading the model, then taking jobs from {without_password(settings.redis_url)}", flush=True)
    run_worker(settings, burst=args.burst)


def cmd_generate(args: argparse.Namespace) -> None:
    body = {"prompt": args.prompt, "max_new_tokens": args.max_new_tokens, "temperature": args.temperature,
            "top_p": args.top_p, "seed": args.seed}
    if args.url:
        from service import client

        try:
            result = client.generate(args.url, body)
        except client.Refused as refused:
            sys.exit(str(refused))
    else:
        import methods  # noqa: F401  (registers every method folder)
        from core.model.loader import load_model
        from core.model.served_model import ServingModel, install_committed
        from core.storage import open_versions
        from serving.generation import SamplingParams, generate

        settings = settings_from(args)
        print("loading the model...", file=sys.stderr, flush=True)
        loaded = load_model(settings, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
        serving = ServingModel(loaded, settings)
        install_committed(serving, versions := open_versions(settings), versions.current())  # the knowledge committed
        ids = loaded.tokenizer(args.prompt)["input_ids"]
        result = vars(generate(serving, ids, SamplingParams(args.max_new_tokens, args.temperature, args.top_p, (),
                                                            args.seed)))
    print(args.prompt + result["text"])
    print(json.dumps({k: v for k, v in result.items() if k != "text"}), file=sys.stderr)


def cmd_teach(args: argparse.Namespace) -> None:
    from service import client

    text = Path(args.text).read_text() if Path(args.text).is_file() else args.text
    probes = []
    for spec in args.probe:
        if "=>" not in spec:
            sys.exit(f"--probe needs the form 'prompt=>answer', got {spec!r}")
        prompt, answer = spec.split("=>", 1)
        probes.append({"prompt": prompt.strip(), "answer": answer.strip()})
    try:
        accepted = client.teach(args.url, text, probes, args.method)
    except client.Refused as refused:
        sys.exit(str(refused))
    print(f"accepted document {accepted['document_id']}", flush=True)
    if not args.wait:
        return
    record = client.wait_for_document(args.url, accepted["document_id"], show=True)
    print(json.dumps({k: record.get(k) for k in ("status", "version", "gate", "scores", "timings")}, indent=2))


def cmd_status(args: argparse.Namespace) -> None:
    from service import client

    print(json.dumps(client.status(args.url), indent=2))


def cmd_calibrate(args: argparse.Namespace) -> None:
    from core.model.loader import load_model
    from core.probes import GENERAL_TOKENS, read_probe_file, shipped_pool
    from core.scoring import greedy_continuations, score_probes
    from core.storage import open_suites

    settings = settings_from(args)
    loaded = load_model(settings, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    pool = read_probe_file(Path(args.from_file)) if args.from_file else shipped_pool()
    if args.limit:
        pool = pool[: args.limit]
    suites = open_suites(settings)
    suite = suites.calibrate(settings.model, pool, lambda probes: score_probes(loaded.model, loaded.tokenizer, probes))
    print(f"NF suite: kept {len(suite['probes'])} of {len(pool)} probes the base model answers")
    # Version 0's continuations of the general prompts too, if not made yet: the server makes both at start.
    suites.ensure_general(settings.model, lambda prompts: greedy_continuations(
        loaded.model, loaded.tokenizer, prompts, GENERAL_TOKENS))


# `ckl bench NAME` runs bench/NAME.py's main (a dash for an underscore), but for the last three.
BENCHES = {name: f"bench.{name.replace('-', '_')}" for name in (
    "generate", "serve", "dtype", "teach", "make-facts", "ta-costs", "phi-transfer", "phi-facts", "phi-heads",
    "phi-kept", "abuse", "auto-probes", "long-document", "scale", "stores", "step-time", "text-passes", "openmp-teams",
    "reach", "reading", "known-names")} | {"lama-ckl": "bench.lama_ckl.cli", "lama-orders": "bench.lama_ckl.orders",
                            "api-overhead": "bench.overhead"}


OWN_PARSERS = {"train-attention": "research.train_attention.cli", "fsck": "ckl.fsck"}
# Packages of the `bench` extra only (pyproject.toml), never needed to serve.
BENCH_ONLY = ("psutil", "matplotlib")


def cmd_bench(args: argparse.Namespace) -> None:
    from importlib import import_module

    try:
        import_module(BENCHES[args.bench]).main(args.rest)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] not in BENCH_ONLY:
            raise
        sys.exit(f"ckl bench {args.bench} needs {exc.name.split('.')[0]}: pip install 'ckl-serve[bench]'")


def cmd_weights(args: argparse.Namespace) -> None:
    from research.train_attention import show

    show.main(args, settings_from(args))


def cmd_export(args: argparse.Namespace) -> None:
    import methods  # noqa: F401  (registers every method folder)
    from core import registry
    from core.model.loader import resolve_model_source
    from core.storage import open_versions
    from core.versions import UnknownVersion

    settings = settings_from(args)
    base = resolve_model_source(settings, progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    versions = open_versions(settings)
    try:
        held = sorted({m["method"] for m in versions.lineage(args.version)})
        if not held:
            raise registry.NotExportable(f"version {args.version} has learned nothing: serve the base model itself")
        if len(held) > 1 or not (spec := registry.get(held[0])).export:
            exports = ", ".join(s.name for s in registry.registered() if s.export)
            raise registry.NotExportable(f"version {args.version} holds {', '.join(held)} knowledge: only a version "
                                         f"taught with one method that exports ({exports}) exports")
        out = spec.export(versions, args.version, args.out, base)
    except (registry.NotExportable, UnknownVersion) as exc:
        sys.exit(f"ckl export: {exc}")
    print(f"version {args.version} written to {out} for {base} ({held[0]} knowledge)")


def cmd_router(args: argparse.Namespace) -> None:
    import uvicorn

    from service.lora_router import create_router, read_routes

    settings = settings_from(args)  # CKL_API_KEYS and the limits, as the server reads them; --host
    if refusal := binding_refusal(settings):
        sys.exit(f"ckl router: {refusal}")
    app = create_router(read_routes(args.routes), args.engine, args.base_model, settings, args.timeout)
    print(f"routing to {args.engine} on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


def local(p: argparse.ArgumentParser) -> None:
    """The flags of a command that loads the model in this process."""
    p.add_argument("--data-dir", type=Path, help="data folder (default ./data or CKL_DATA_DIR)")
    p.add_argument("--model", help="'default' (packaged Gemma 3 270M), a local path or a hub id")


def add_server_commands(sub: argparse._SubParsersAction) -> None:
    """serve, keys, worker: running the service."""
    p = sub.add_parser("serve", help="run the HTTP server")
    local(p)
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--redis-url", help="use RQ on Redis (then run `ckl worker`); default: embedded worker")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("keys", help="make an API key: prints the key and the entry for CKL_API_KEYS")
    keys_sub = p.add_subparsers(dest="keys_command", required=True)
    k = keys_sub.add_parser("new")
    k.add_argument("--name", required=True)
    k.add_argument("--scopes", default="generate", help="comma-separated: generate, teach, metrics, admin")
    k.add_argument("--namespace", help="a tenant's namespace: the key teaches into it and asks it and the shared one")
    k.add_argument("--shared", action="store_true", help="a teach key without a namespace (what it teaches reaches all)")
    k.set_defaults(func=cmd_keys)

    p = sub.add_parser("worker", help="run an RQ worker that keeps the model loaded")
    local(p)
    p.add_argument("--redis-url")
    p.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    p.set_defaults(func=cmd_worker)


def add_client_commands(sub: argparse._SubParsersAction) -> None:
    """generate, teach, status: asking a server (generate also in-process)."""
    p = sub.add_parser("generate", help="complete a prompt (against --url, or in-process)")
    local(p)
    p.add_argument("prompt")
    p.add_argument("--url", help="a running server, e.g. " + DEFAULT_URL)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("teach", help="post a document (a file or text) and optionally wait for the result")
    p.add_argument("text")
    p.add_argument("--probe", action="append", default=[], help="'prompt=>answer' (repeatable)")
    p.add_argument("--method", help="a registered method (default: the server's, CKL_METHOD)")
    p.add_argument("--wait", action="store_true")
    p.add_argument("--url", default=DEFAULT_URL)
    p.set_defaults(func=cmd_teach)

    p = sub.add_parser("status", help="current version, retention and document counts")
    p.add_argument("--url", default=DEFAULT_URL)
    p.set_defaults(func=cmd_status)


def add_model_commands(sub: argparse._SubParsersAction) -> None:
    """probes, train-attention, weights, export, bench: the model's data, phi, and measurements."""
    p = sub.add_parser("probes", help="probe suites")
    probes_sub = p.add_subparsers(dest="probes_command", required=True)
    c = probes_sub.add_parser("calibrate", help="score a pool on the base model and keep what it answers as the NF "
                                                "suite (and make version 0's general-prompt continuations)")
    local(c)
    c.add_argument("--from", dest="from_file", help="TSV, JSONL {prompt, answer} or LAMA-ckl rows (default: shipped pool)")
    c.add_argument("--limit", type=int)
    c.set_defaults(func=cmd_calibrate)

    sub.add_parser("train-attention", help="meta-train phi, the Train-Attention model (see its --help)")
    sub.add_parser("fsck", help="check a data folder's consistency and say what a repair would do (see its --help)")

    p = sub.add_parser("weights", help="show the Train-Attention weight of every token of a text")
    local(p)
    p.add_argument("text", help="the text, or @FILE to read it from a file")
    p.add_argument("--checkpoint", type=Path, help="a phi checkpoint (default: the packaged one for the model)")
    p.add_argument("--png", type=Path, help="also write a heatmap image")
    p.add_argument("--html", type=Path, help="also write an HTML page with the tokens shaded")
    p.set_defaults(func=cmd_weights)

    p = sub.add_parser("export", help="write an adapter version as a PEFT adapter folder, or a routed version as a "
                       "PEFT adapter per subject and the routes (for vLLM, LoRAX, PEFT, ...)")
    local(p)
    p.add_argument("--version", type=int, required=True)
    p.add_argument("out", type=Path)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("router", help="route OpenAI requests to an engine's LoRA adapters by a routed export's "
                       "routes.json (the subject's adapter as the model)")
    p.add_argument("--routes", type=Path, required=True, help="routes.json from `ckl export` of a routed version")
    p.add_argument("--engine", required=True, help="the engine's URL (vLLM, LoRAX), serving the exported adapters")
    p.add_argument("--base-model", required=True, help="the engine's name for the base model (no subject named)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds the engine has to answer (504 after)")
    p.set_defaults(func=cmd_router)

    p = sub.add_parser("bench", help="benchmarks that print numbers")
    p.add_argument("bench", choices=list(BENCHES))
    p.add_argument("rest", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_bench)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ckl", description="ckl-serve: a language-model server that keeps learning.")
    sub = parser.add_subparsers(dest="command", required=True)
    add_server_commands(sub)
    add_client_commands(sub)
    add_model_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] and argv[0] in OWN_PARSERS:  # a command with its own parser, flags and --help included
        return importlib.import_module(OWN_PARSERS[argv[0]]).main(argv[1:])
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
