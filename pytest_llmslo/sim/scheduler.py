"""Continuous batching on a simulated clock: which tokens each step computes.

The model follows vLLM's V1 scheduler, which SGLang's and TensorRT-LLM's behave much like:

- Every request has ``num_tokens`` (prompt + output so far) and ``num_computed`` (tokens
  whose KV is in the cache). A step gives each scheduled request
  ``num_tokens - num_computed`` tokens, capped by what is left of the step's token budget:
  1 for a decode, a chunk for a prefill (chunked prefill). When a request's computed
  tokens reach ``num_tokens`` after a step, it samples one output token. Decodes and
  prefill chunks share the budget (``max_num_batched_tokens``).
- Two limits of vLLM's ``SchedulerConfig`` (0.8) bound the prefills in a step: a
  prefill's chunk is at most ``long_prefill_token_threshold`` tokens, and at most
  ``max_num_partial_prefills`` requests prefill at once (0 for either: no limit). A
  running request whose prefill finds no free lane sits the step out; a waiting one stops
  admission (FCFS). So a prompt takes several steps, each as long as the decodes batched
  with it make it, and under load new prompts queue for a lane: TTFT grows with the load.
- Running requests are served first, in arrival order; then waiting requests are admitted
  first-come first-served while the budget, ``max_num_seqs`` and free KV blocks allow.
  A request that cannot get blocks for its chunk stops admission (head-of-line FCFS).
  Without chunked prefill a request is admitted only when its whole prefill fits what is
  left of the budget, so ``add`` refuses one whose prefill could never fit a whole budget:
  its prompt plus the output a preemption would make it recompute (prompt + max_tokens
  - 1 tokens). Left in the queue it would block every later request forever.
- The KV cache is a pool of ``block_size``-token blocks. When a running request needs a
  block and none is free, the most recently admitted running request is preempted: its
  blocks are freed and it goes back to the front of the queue to be recomputed
  (prefill of prompt + output so far). No new request is admitted in a step that
  preempted.
- Prefix caching: a prompt's full blocks are hashed (chained, so a hash names a whole
  prefix). Blocks of computed prompts stay in the cache after their request ends, as
  evictable blocks (LRU); a new request whose leading block hashes are cached starts with
  those tokens computed and skips their prefill (at least one token is always computed).
- A request that arrives with ``num_computed > 0`` (the decode side of a disaggregated
  deployment, its prompt's KV transferred from a prefill instance) is admitted with blocks
  for what it has and computes only what follows; preempted, it is recomputed from the
  start like any other.

``Scheduler.step(now)`` plans one step, prices it with the ``CostModel``, applies it and
returns a ``StepResult`` whose tokens exist at ``now + duration``. A step that would
schedule nothing while requests wait (and nothing runs or was preempted) would be an empty
0-s step forever: ``step`` raises ``SchedulerStalled`` naming the stuck request instead.
Nothing here sleeps or reads a clock, so tests drive it on a fake one.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .costmodel import CostModel, StepCost

RequestStatus = Literal["waiting", "running", "finished", "aborted"]


class SchedulerStalled(RuntimeError):
    """A step could schedule nothing although requests wait: the request at the head of
    the queue can never be admitted, and FCFS would block everything behind it. An
    invariant of the scheduler is broken (``add`` refuses such requests)."""

    def __init__(self, request: SimRequest, reason: str) -> None:
        super().__init__(f"request {request.rid} can never be scheduled: {reason}")
        self.request = request


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Scheduling limits of one engine (vLLM names: ``max_num_batched_tokens``,
    ``max_num_seqs``, ``block_size``, ``enable_prefix_caching``,
    ``long_prefill_token_threshold``, ``max_num_partial_prefills``; 0 for the last two:
    no limit)."""

    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 256
    block_size: int = 16
    num_blocks: int = 10000
    enable_prefix_caching: bool = True
    chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    max_num_partial_prefills: int = 0

    def __post_init__(self) -> None:
        for name in ("max_num_batched_tokens", "max_num_seqs", "block_size", "num_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("long_prefill_token_threshold", "max_num_partial_prefills"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: no limit), got {getattr(self, name)}")

    def chunk(self, remaining: int, budget: int) -> int:
        """New tokens a request with ``remaining`` tokens to compute gets from what is left
        of the step's ``budget``: capped at ``long_prefill_token_threshold`` when set (and
        chunked prefill is on), as vLLM's V1 scheduler caps a long prefill's chunk."""
        cap = self.long_prefill_token_threshold
        if cap and self.chunked_prefill and remaining > cap:
            remaining = cap
        return min(remaining, budget)


@dataclass(slots=True, eq=False)
class SimRequest:
    """One request inside the scheduler. ``block_hashes`` are the prompt's full-block
    hashes (empty when prefix caching does not apply)."""

    rid: str
    prompt_tokens: int
    max_tokens: int
    arrival_s: float = 0.0
    block_hashes: tuple[int, ...] = ()
    num_computed: int = 0
    num_output: int = 0
    blocks: int = 0
    shared: list[int] = field(default_factory=list)
    registered: int = 0
    status: RequestStatus = "waiting"
    preemptions: int = 0
    cached_tokens: int = 0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finished_s: float | None = None

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ValueError("a request needs at least one prompt token")
        if self.max_tokens < 1:
            raise ValueError("a request needs max_tokens >= 1")

    @property
    def num_tokens(self) -> int:
        return self.prompt_tokens + self.num_output

    @property
    def done(self) -> bool:
        return self.status in ("finished", "aborted")


class BlockManager:
    """KV-cache blocks: private blocks per request, plus hashed prompt blocks shared by
    reference count and kept (evictable, LRU) after their last user ends."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.private = 0
        self.refs: dict[int, int] = {}
        self.idle: OrderedDict[int, None] = OrderedDict()
        self.active_shared = 0

    @property
    def used(self) -> int:
        """Blocks held by requests (shared blocks counted once)."""
        return self.private + self.active_shared

    @property
    def available(self) -> int:
        """Blocks a request can get now: free ones plus evictable cached ones."""
        return self.num_blocks - self.used

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def alloc(self, n: int) -> bool:
        """Take ``n`` private blocks, evicting cached idle blocks (LRU) if needed."""
        if n <= 0:
            return True
        if n > self.available:
            return False
        free = self.num_blocks - self.used - len(self.idle)
        for _ in range(max(n - free, 0)):
            h, _ = self.idle.popitem(last=False)
            del self.refs[h]
        self.private += n
        return True

    def match(self, hashes: Sequence[int], limit: int) -> tuple[int, int]:
        """(leading cached blocks of ``hashes`` up to ``limit``, how many of them idle)."""
        hits = 0
        idle = 0
        for h in hashes[:limit]:
            r = self.refs.get(h)
            if r is None:
                break
            hits += 1
            if r == 0:
                idle += 1
        return hits, idle

    def acquire(self, req: SimRequest, hits: int) -> None:
        """Give ``req`` references to its first ``hits`` cached prefix blocks."""
        for h in req.block_hashes[:hits]:
            r = self.refs[h]
            if r == 0:
                del self.idle[h]
                self.active_shared += 1
            self.refs[h] = r + 1
            req.shared.append(h)
        req.blocks += hits
        req.registered = hits

    def register(self, req: SimRequest, full_blocks: int) -> None:
        """Publish ``req``'s computed full prompt blocks so later requests can share them."""
        upto = min(full_blocks, len(req.block_hashes))
        for i in range(req.registered, upto):
            h = req.block_hashes[i]
            if h in self.refs:
                # Computed twice concurrently: keep this copy private, as vLLM does.
                continue
            self.refs[h] = 1
            self.active_shared += 1
            self.private -= 1
            req.shared.append(h)
        req.registered = max(req.registered, upto)

    def free(self, req: SimRequest) -> None:
        """Release everything ``req`` holds; its shared blocks stay cached while unused."""
        self.private -= req.blocks - len(req.shared)
        for h in req.shared:
            r = self.refs[h] - 1
            self.refs[h] = r
            if r == 0:
                self.active_shared -= 1
                self.idle[h] = None
        req.shared.clear()
        req.blocks = 0
        req.registered = 0

    def evict_idle(self) -> int:
        """Drop every cached block no request holds (vLLM's ``reset_prefix_cache``);
        returns how many. Blocks of running requests stay theirs."""
        n = len(self.idle)
        for h in self.idle:
            del self.refs[h]
        self.idle.clear()
        return n

    @property
    def usage(self) -> float:
        """Fraction of blocks held by requests (vLLM's KV-cache usage)."""
        return self.used / self.num_blocks if self.num_blocks else 0.0


@dataclass(frozen=True, slots=True)
class StepResult:
    """One simulated step: it starts at ``start_s`` and ends, with ``emitted`` tokens
    sampled, at ``end_s``. ``emitted`` holds (request, output token index)."""

    start_s: float
    duration_s: float
    cost: StepCost
    scheduled: tuple[tuple[SimRequest, int], ...]
    emitted: tuple[tuple[SimRequest, int], ...]
    finished: tuple[SimRequest, ...]
    preempted: tuple[SimRequest, ...]

    @property
    def end_s(self) -> float:
        return self.start_s + self.duration_s


@dataclass(slots=True)
class SchedulerStats:
    """Counters since start (Prometheus counters and gauges come from these)."""

    steps: int = 0
    busy_s: float = 0.0
    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    finished: int = 0
    aborted: int = 0
    failed: int = 0


class Scheduler:
    """The continuous-batching loop's decisions; see the module docstring."""

    def __init__(self, config: SchedulerConfig, cost: CostModel) -> None:
        self.config = config
        self.cost = cost
        self.blocks = BlockManager(config.num_blocks, config.block_size)
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = SchedulerStats()

    def add(self, req: SimRequest) -> None:
        """Queue a new request (it joins the next step that has room). ``ValueError`` for
        a request that could never run: more KV blocks than the cache has, or, without
        chunked prefill, a prefill longer than the step budget."""
        cfg = self.config
        if self.blocks.blocks_for(req.prompt_tokens + req.max_tokens) > cfg.num_blocks:
            raise ValueError(
                f"request {req.rid} needs more KV blocks than the cache has "
                f"({cfg.num_blocks} blocks of {cfg.block_size} tokens)"
            )
        # A preempted request re-prefills its prompt and the output so far in one go.
        longest = req.prompt_tokens + req.max_tokens - 1
        if not cfg.chunked_prefill and longest > cfg.max_num_batched_tokens:
            raise ValueError(
                f"chunked prefill is disabled and max_num_batched_tokens is "
                f"{cfg.max_num_batched_tokens}, but this request ({req.prompt_tokens} prompt "
                f"tokens, max_tokens {req.max_tokens}) may need a prefill of {longest} tokens "
                "in one step, so it could never be scheduled. Please reduce the length of the "
                "messages or completion."
            )
        if not self.config.enable_prefix_caching:
            req.block_hashes = ()
        req.status = "waiting"
        self.waiting.append(req)

    def _drop(self, req: SimRequest) -> bool:
        if req.done:
            return False
        if req.status == "running":
            self.running.remove(req)
            self.blocks.free(req)
        else:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        req.status = "aborted"
        return True

    def abort(self, req: SimRequest) -> None:
        """Drop a request (its client went away): free its blocks now."""
        if self._drop(req):
            self.stats.aborted += 1

    def fail(self, req: SimRequest) -> None:
        """Drop a request the engine cannot serve (see ``SchedulerStalled``)."""
        if self._drop(req):
            self.stats.failed += 1

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def _preempt(self, req: SimRequest) -> None:
        self.running.remove(req)
        self.blocks.free(req)
        req.num_computed = 0
        req.status = "waiting"
        req.preemptions += 1
        self.waiting.appendleft(req)
        self.stats.preemptions += 1

    def schedule(self, now: float = 0.0) -> tuple[list[tuple[SimRequest, int]], list[SimRequest]]:
        """Pick this step's (request, new tokens) and the requests preempted for it."""
        cfg = self.config
        bm = self.blocks
        budget = cfg.max_num_batched_tokens
        scheduled: list[tuple[SimRequest, int]] = []
        preempted: list[SimRequest] = []
        running = self.running
        i = 0
        # Prefills (more than one token to compute) this step may still take.
        lanes = cfg.max_num_partial_prefills or cfg.max_num_seqs
        while i < len(running) and budget > 0:
            req = running[i]
            left = req.num_tokens - req.num_computed
            if left > 1:
                if lanes <= 0:
                    i += 1  # its next chunk waits for a step with a free lane
                    continue
                lanes -= 1
            n = cfg.chunk(left, budget)
            need = bm.blocks_for(req.num_computed + n) - req.blocks
            placed = True
            while need > 0 and not bm.alloc(need):
                victim = running[-1]
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    placed = False
                    break
            if not placed:
                break
            if need > 0:
                req.blocks += need
            scheduled.append((req, n))
            budget -= n
            i += 1

        if not preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                req = waiting[0]
                hits = idle_hits = 0
                arrived_with_kv = req.num_computed > 0
                if not arrived_with_kv and req.block_hashes:
                    # Leave at least one token to compute: its logits give the next token.
                    limit = (req.num_tokens - 1) // cfg.block_size
                    hits, idle_hits = bm.match(req.block_hashes, limit)
                # A request of a disaggregated decode instance arrives with the KV of its
                # prompt (transferred from the prefill instance): it needs blocks for it,
                # and only its next token to compute.
                start = max(hits * cfg.block_size, req.num_computed)
                remaining = req.num_tokens - start
                if remaining > 1 and lanes <= 0:
                    break  # FCFS: it waits for a free prefill lane
                n = cfg.chunk(remaining, budget)
                if n < remaining and not cfg.chunked_prefill:
                    break
                need = bm.blocks_for(start + n) - hits
                # Reviving idle cached blocks takes them out of the evictable pool.
                if need + idle_hits > bm.available:
                    break
                waiting.popleft()
                if remaining > 1:
                    lanes -= 1
                if hits:
                    bm.acquire(req, hits)
                bm.alloc(need)
                req.blocks += need
                req.num_computed = start
                if not arrived_with_kv:
                    req.cached_tokens = start
                    self.stats.prefix_queries += req.num_tokens
                    self.stats.prefix_hits += start
                req.status = "running"
                if req.first_scheduled_s is None:
                    req.first_scheduled_s = now
                running.append(req)
                scheduled.append((req, n))
                budget -= n
        return scheduled, preempted

    def _stall_reason(self, req: SimRequest) -> str:
        cfg = self.config
        remaining = req.num_tokens - req.num_computed
        if not cfg.chunked_prefill and remaining > cfg.max_num_batched_tokens:
            return (
                f"chunked prefill is off and its prefill of {remaining} tokens exceeds "
                f"max_num_batched_tokens={cfg.max_num_batched_tokens}"
            )
        return (
            f"nothing runs and it was not admitted ({remaining} tokens to compute, "
            f"{self.blocks.available} of {cfg.num_blocks} KV blocks available)"
        )

    def step(self, now: float) -> StepResult:
        """Plan, price and apply one step starting at ``now`` (simulated seconds).

        ``SchedulerStalled`` when requests wait but nothing could be scheduled (see the
        module docstring): the caller must not retry the same state."""
        scheduled, preempted = self.schedule(now)
        if not scheduled and not preempted and self.waiting:
            head = self.waiting[0]
            raise SchedulerStalled(head, self._stall_reason(head))
        cost = self.cost.step((req.num_computed, n) for req, n in scheduled)
        end = now + cost.total_s
        emitted: list[tuple[SimRequest, int]] = []
        finished: list[SimRequest] = []
        bs = self.config.block_size
        prompt_work = 0
        for req, n in scheduled:
            before = req.num_computed
            req.num_computed = before + n
            if before < req.prompt_tokens:
                prompt_work += min(req.num_computed, req.prompt_tokens) - before
            if req.block_hashes and req.registered < len(req.block_hashes):
                self.blocks.register(req, min(req.num_computed, req.prompt_tokens) // bs)
            if req.num_computed >= req.num_tokens:
                idx = req.num_output
                req.num_output += 1
                if idx == 0:
                    req.first_token_s = end
                emitted.append((req, idx))
                if req.num_output >= req.max_tokens:
                    finished.append(req)
        for req in finished:
            self.running.remove(req)
            self.blocks.free(req)
            req.status = "finished"
            req.finished_s = end
        st = self.stats
        if scheduled:
            st.steps += 1
            st.busy_s += cost.total_s
        st.prompt_tokens += prompt_work
        st.generation_tokens += len(emitted)
        st.finished += len(finished)
        return StepResult(
            start_s=now,
            duration_s=cost.total_s,
            cost=cost,
            scheduled=tuple(scheduled),
            emitted=tuple(emitted),
            finished=tuple(finished),
            preempted=tuple(preempted),
        )
