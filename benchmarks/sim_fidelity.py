"""The sim's six setups against the reference engine comparison (Llama-3.1-70B FP8 on
4x H100 SXM; vLLM, SGLang, TRT-LLM, each aggregated and behind a Dynamo-like
disaggregated frontend), run offline: the sim's scheduler and cost model under a closed
loop, with no HTTP and no host jitter, so the figures are those of the model itself.

    .venv/bin/python benchmarks/sim_fidelity.py [--step 4] [--measured 400] > fidelity.md

Prints Markdown (progress goes to stderr): each setup's knee under TTFT P99 < 500 ms and
ITL P50 < 30 ms on ShareGPT-like lengths beside the reference row, the ratios over vLLM,
whether the order of the six holds, the vLLM-like sweep beside the reference's with its
TTFT P99 checked against the reference's within ±30 % at each point (c8 to c64; the exit
status is 1 when a point is outside, and stderr names it), the gain of disaggregation
with unique and shared prompts, the KV-aware router against round robin, and the gain of
disaggregation per input length. About 2.5 minutes on 2 cores with the defaults.
docs/sim.md holds the last run and what it shows.
"""

from __future__ import annotations

import argparse
import sys
import time

from pytest_llmslo.sim.fidelity import report, ttft_outside_band, vllm_sweep


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step", type=int, default=4, help="knee search resolution (users)")
    parser.add_argument(
        "--measured", type=int, default=400, help="measured requests per level (after warm-up)"
    )
    args = parser.parse_args(argv)
    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"[{time.monotonic() - t0:6.1f} s] {msg}", file=sys.stderr, flush=True)

    sweep = vllm_sweep(measured=args.measured)
    print(report(step=args.step, measured=args.measured, progress=progress, sweep=sweep))
    outside = ttft_outside_band(sweep)
    for miss in outside:
        print(f"TTFT P99 outside the reference's band: {miss}", file=sys.stderr)
    progress("done")
    return 1 if outside else 0


if __name__ == "__main__":
    raise SystemExit(main())
