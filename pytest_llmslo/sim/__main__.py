"""``python -m pytest_llmslo.sim``: start the simulated engine.

    python -m pytest_llmslo.sim --host 127.0.0.1 --port 8000 \\
        --profile llama3-70b-fp8-4xh100-vllm --model llama-70b [--trace-file tokens.jsonl]

``--list-profiles`` prints the named profiles and exits. Custom numbers come from
``--profile-file FILE.json`` (see ``profiles.profile_from_mapping``) and the flags below,
which override the profile: hardware and scheduling, and the deployment (data-parallel
replicas, disaggregated prefill/decode pools, the router, the KV link). Once listening,
one line goes to stdout:
``llmslo-sim ready on http://HOST:PORT (profile NAME, model MODEL)``; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from .answerer import quality_from_mapping
from .cluster import LINKS, topology_from_mapping
from .profiles import DEFAULT_PROFILE, GPUS, PROFILES, Profile, get_profile, profile_from_mapping
from .server import SimServer
from .speednoise import SimNoise

log = logging.getLogger("pytest_llmslo.sim")


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {s!r}.") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"Value must be >= 1, got {s!r}.")
    return v


def _nonneg_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {s!r}.") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"Value must be >= 0, got {s!r}.")
    return v


def _nonneg_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {s!r}.") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"Value must be >= 0, got {s!r}.")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pytest_llmslo.sim",
        description="A simulated LLM serving engine with an OpenAI-compatible API.",
    )
    _add_serving(p)
    _add_hardware(p)
    _add_deployment(p)
    _add_noise(p)
    _add_logging(p)
    return p


def _add_serving(p: argparse.ArgumentParser) -> None:
    """What is served and where, and what to print instead of serving."""
    p.add_argument("--host", default="127.0.0.1", help="Address to listen on. Default: 127.0.0.1")
    p.add_argument(
        "--port", type=int, default=8000, help="Port (0 picks a free one). Default: 8000"
    )
    p.add_argument(
        "--profile", default=DEFAULT_PROFILE, help=f"Named profile. Default: {DEFAULT_PROFILE}"
    )
    p.add_argument("--profile-file", help="JSON file with a custom profile (overrides --profile).")
    p.add_argument(
        "--model", help="Model name served and checked in requests. Default: the profile's model"
    )
    p.add_argument(
        "--served-model-name",
        dest="model_alias",
        help="Name requests use (wins over --model, as in vLLM).",
    )
    p.add_argument(
        "--lora-modules",
        nargs="+",
        default=[],
        metavar="NAME[=PATH]",
        help="LoRA adapters served besides the base model, as in vLLM (requests may ask for "
        "NAME; the sim serves them at the base model's cost, and /metrics counts requests "
        "per adapter).",
    )
    p.add_argument(
        "--trace-file", help="Append one JSON line per token written (rid, i, t_ns, sched_ns)."
    )
    p.add_argument("--list-profiles", action="store_true", help="List the profiles and exit.")
    p.add_argument(
        "--show-profile", action="store_true", help="Print the resolved profile as JSON and exit."
    )


def _add_hardware(p: argparse.ArgumentParser) -> None:
    """Hardware and scheduling, each overriding the profile's."""
    g = p.add_argument_group("custom hardware and scheduling (override the profile)")
    g.add_argument("--gpu", choices=sorted(GPUS), help="GPU type.")
    g.add_argument(
        "--tp",
        "--tensor-parallel-size",
        dest="tp",
        type=_positive_int,
        help="Tensor-parallel GPUs.",
    )
    g.add_argument(
        "--max-model-len",
        type=_positive_int,
        help="Context length (prompt + output). Default: 8192",
    )
    g.add_argument("--max-num-batched-tokens", type=_positive_int, help="Token budget per step.")
    g.add_argument("--max-num-seqs", type=_positive_int, help="Largest batch.")
    g.add_argument("--block-size", type=_positive_int, help="Tokens per KV block.")
    g.add_argument(
        "--num-gpu-blocks", type=_positive_int, help="KV-cache blocks (default: from GPU memory)."
    )
    g.add_argument(
        "--gpu-memory-utilization", type=_nonneg_float, help="Fraction of GPU memory used."
    )
    g.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Prefix caching.",
    )
    g.add_argument("--no-chunked-prefill", action="store_true", help="Prefill whole prompts only.")
    g.add_argument(
        "--quant-penalty",
        type=_nonneg_float,
        help="Added chance (0 to 1) of a wrong answer to an eval item (quality.py): a "
        "quantisation that costs accuracy.",
    )
    g.add_argument(
        "--long-prefill-token-threshold",
        type=_nonneg_int,
        help="Largest prefill chunk per request per step (0: no cap).",
    )
    g.add_argument(
        "--max-num-partial-prefills",
        type=_nonneg_int,
        help="Requests prefilling in one step (0: no limit).",
    )
    g.add_argument(
        "--prefill-interference",
        type=_nonneg_float,
        help="Share (0 to 1) of a prefill chunk's compute that lengthens the decodes' step.",
    )
    g.add_argument("--step-overhead-ms", type=_nonneg_float, help="Fixed CPU time per step.")
    g.add_argument(
        "--per-seq-overhead-ms", type=_nonneg_float, help="CPU time per sequence per step."
    )


def _add_deployment(p: argparse.ArgumentParser) -> None:
    """The deployment: replicas, disaggregated prefill and decode pools, the router."""
    d = p.add_argument_group(
        "deployment (override the profile): replicas, disaggregated prefill/decode, router"
    )
    d.add_argument(
        "--topology",
        choices=("aggregated", "disaggregated"),
        help="aggregated: every request on one instance; disaggregated: prefill and decode "
        "pools with the KV cache moved between them.",
    )
    d.add_argument("--replicas", type=_positive_int, help="Data-parallel replicas (aggregated).")
    d.add_argument("--prefill-workers", type=_positive_int, help="Prefill instances.")
    d.add_argument("--prefill-tp", type=_positive_int, help="GPUs per prefill instance.")
    d.add_argument("--decode-workers", type=_positive_int, help="Decode instances.")
    d.add_argument("--decode-tp", type=_positive_int, help="GPUs per decode instance.")
    d.add_argument(
        "--router",
        choices=("round_robin", "kv"),
        help="How the frontend picks an instance: round_robin, or kv (the longest cached "
        "prefix, then the least loaded).",
    )
    d.add_argument(
        "--kv-link",
        choices=sorted(LINKS),
        help="Link the KV cache crosses: nvlink (one node) or ib (InfiniBand, across nodes).",
    )
    d.add_argument(
        "--frontend-overhead-ms",
        type=_nonneg_float,
        help="Time in the frontend before a request reaches an instance.",
    )


def _add_noise(p: argparse.ArgumentParser) -> None:
    """Run-to-run noise (``speednoise.py``): off unless asked for."""
    n = p.add_argument_group(
        "run-to-run noise (off by default; see pytest_llmslo/sim/speednoise.py)"
    )
    n.add_argument(
        "--speed-factor",
        type=float,
        default=1.0,
        help="Multiply every step's time (1.1: an engine 10%% slower). Default: 1",
    )
    n.add_argument(
        "--run-noise",
        type=_nonneg_float,
        default=0.0,
        metavar="SIGMA",
        help="Spread of a per-run speed factor drawn at start, exp(N(0, SIGMA)) (0.015: 1.5%%).",
    )
    n.add_argument(
        "--step-jitter",
        type=_nonneg_float,
        default=0.0,
        metavar="SIGMA",
        help="Spread of each step's time, N(1, SIGMA) (0.03: 3%%).",
    )
    n.add_argument(
        "--noise-seed", type=int, default=None, help="Seed of the noise. Default: a fresh one"
    )


def _add_logging(p: argparse.ArgumentParser) -> None:
    """What the server logs: late token writes, and at which level."""
    p.add_argument(
        "--lag-warn-ms",
        type=_nonneg_float,
        default=20.0,
        help="Warn when a step's tokens are written this late. Default: 20",
    )
    p.add_argument("--log-level", default="INFO", help="Logging level. Default: INFO")


def resolve_profile(args: argparse.Namespace) -> Profile:
    """The profile the flags describe (named or file, then per-flag overrides)."""
    if args.profile_file:
        with open(args.profile_file, encoding="utf-8") as f:
            profile = profile_from_mapping(json.load(f))
    else:
        profile = get_profile(args.profile)
    engine = {}
    for flag, fld in (
        ("max_num_batched_tokens", "max_num_batched_tokens"),
        ("max_num_seqs", "max_num_seqs"),
        ("block_size", "block_size"),
        ("gpu_memory_utilization", "gpu_memory_utilization"),
        ("enable_prefix_caching", "enable_prefix_caching"),
        ("long_prefill_token_threshold", "long_prefill_token_threshold"),
        ("max_num_partial_prefills", "max_num_partial_prefills"),
        ("prefill_interference", "prefill_interference"),
    ):
        v = getattr(args, flag)
        if v is not None:
            engine[fld] = v
    if args.no_chunked_prefill:
        engine["chunked_prefill"] = False
    if args.step_overhead_ms is not None:
        engine["step_overhead_s"] = args.step_overhead_ms / 1e3
    if args.per_seq_overhead_ms is not None:
        engine["per_seq_overhead_s"] = args.per_seq_overhead_ms / 1e3
    # Any: the values are the fields' own types, each checked where it is built above.
    changes: dict[str, Any] = {}
    if engine:
        changes["engine"] = dataclasses.replace(profile.engine, **engine)
    if args.gpu:
        changes["gpu"] = GPUS[args.gpu]
    if args.tp:
        changes["tp"] = args.tp
    if args.max_model_len:
        changes["max_model_len"] = args.max_model_len
    if args.num_gpu_blocks:
        changes["num_blocks"] = args.num_gpu_blocks
    if args.quant_penalty is not None:
        changes["quality"] = quality_from_mapping(
            {"quant_penalty": args.quant_penalty}, profile.quality
        )
    topology = _topology_changes(args, profile)
    if topology:
        changes["topology"] = topology_from_mapping(topology, profile.topology)
    noise = SimNoise.draw(
        speed=args.speed_factor,
        run_sigma=args.run_noise,
        step_sigma=args.step_jitter,
        seed=args.noise_seed,
    )
    if noise.active:
        changes["noise"] = noise
    if changes:
        profile = dataclasses.replace(profile, **changes)
    return profile


def _topology_changes(args: argparse.Namespace, profile: Profile) -> dict[str, object]:
    out: dict[str, object] = {}
    if args.topology:
        out["mode"] = args.topology
    for flag, key in (
        ("replicas", "replicas"),
        ("router", "router"),
        ("kv_link", "link"),
    ):
        if getattr(args, flag) is not None:
            out[key] = getattr(args, flag)
    if args.frontend_overhead_ms is not None:
        out["frontend_overhead_s"] = args.frontend_overhead_ms / 1e3
    tp = args.tp or profile.tp
    for role in ("prefill", "decode"):
        workers, role_tp = getattr(args, f"{role}_workers"), getattr(args, f"{role}_tp")
        base = getattr(profile.topology, role)
        if (
            workers is None
            and role_tp is None
            and not (args.topology == "disaggregated" and base is None)
        ):
            continue
        out[role] = {
            "instances": workers or (base.instances if base else 1),
            "tp": role_tp or (base.tp if base else tp),
        }
    return out


async def serve(
    profile: Profile, model: str, host: str, port: int, args: argparse.Namespace
) -> None:
    server = SimServer(
        profile,
        model,
        trace_file=args.trace_file,
        lag_warn_s=args.lag_warn_ms / 1e3,
        adapters=tuple(m.split("=", 1)[0] for m in args.lora_modules),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    bound = await server.start(host, port)
    shown = f"[{host}]" if ":" in host else host
    print(
        f"llmslo-sim ready on http://{shown}:{bound} (profile {profile.name}, model {model})",
        flush=True,
    )
    log.info(
        "%s on %d GPUs; KV cache: %d blocks of %d tokens; step budget %d tokens; max batch %d",
        profile.topology.describe(),
        profile.gpus,
        server.engine.cluster.kv_blocks(),
        profile.engine.block_size,
        profile.engine.max_num_batched_tokens,
        profile.engine.max_num_seqs,
    )
    if profile.noise.active:
        n = profile.noise
        log.info("noise: speed factor %.4f, step jitter %g, seed %d", n.speed, n.step_sigma, n.seed)
    try:
        await stop.wait()
    finally:
        await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.list_profiles:
        width = max(len(n) for n in PROFILES)
        for name, prof in sorted(PROFILES.items()):
            print(f"{name:<{width}}  {prof.gpus} GPUs  {prof.description}")
        return 0
    try:
        profile = resolve_profile(args)
        profile.cluster()  # sizes every instance: a model that does not fit fails here
    except (ValueError, OSError, KeyError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.show_profile:
        print(json.dumps(profile.to_dict(), indent=2))
        return 0
    # As in vLLM, --served-model-name is what requests name when both are given.
    model = args.model_alias or args.model or profile.model.name
    try:
        asyncio.run(serve(profile, model, args.host, args.port, args))
    except OSError as e:
        print(f"error: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
