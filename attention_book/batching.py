"""Serving a GPT to many requests at once: static and continuous batching on a paged cache.

A server receives prompts and generates a continuation for each, token by token, until an
end-of-sequence token or a length limit. Running the model on several sequences at once costs
little more than on one (the weights are read once per step), so requests are batched. How
they are batched decides how long each waits:

- **Static batching** takes ``max_batch`` requests, runs them until the *last* one is done, and
  only then takes the next ones. A sequence that ends early keeps its place (it is computed
  and thrown away) while the others finish, and the waiting requests wait.
- **Continuous batching** (iteration-level scheduling, Yu et al., 2022) decides at *every*
  step: finished sequences leave the batch at once and waiting requests take their places,
  their prompts processed in the same step as the others' next tokens.

Both need a model step that takes sequences at different positions, some with a whole prompt
and some with one token: `paged_forward` runs the GPT of `attention_book.gpt` on the tokens of
all sequences side by side (the projections and feed-forward networks see one long batch of
tokens) and lets each sequence attend to its own keys and values through the paged cache
(`attention_book.paged_cache`). Orca calls this *selective batching*: batch every operation
except attention, which runs per sequence.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from attention_book.gpt import GPT
from attention_book.multihead import merge_heads
from attention_book.paged_cache import PagedKVCache, paged_attention
from attention_book.rotary import apply_rotary
from attention_book.timing import torch_threads

__all__ = ["POLICIES", "Request", "paged_forward", "parallel_samples", "serve"]

POLICIES = ("static", "continuous")


@dataclass(frozen=True)
class Request:
    """A prompt to continue.

    Attributes:
        prompt: Its token indices (at least one).
        max_new_tokens: Most tokens to generate (at least one).
    """

    prompt: tuple[int, ...]
    max_new_tokens: int


# --8<-- [start:paged_forward]
@torch.no_grad()
def paged_forward(model: GPT, cache: PagedKVCache, sequences: list[tuple[int, Tensor]]) -> Tensor:
    """One step of the GPT over several sequences, each continuing from its own position.

    Each sequence brings its new tokens (a whole prompt, or the last token generated); their
    keys and values go into the cache, and the logits of each sequence's last new token come
    back. Everything but attention runs on all new tokens at once.

    Args:
        model: A GPT with softmax attention and rotary or no positions, in eval mode.
        cache: The paged cache; a sequence must have been added to it before its first step.
        sequences: ``(seq_id, new_tokens)`` pairs.

    Returns:
        The next-token logits of each sequence.

    Shapes:
        - new_tokens: ``(n_i,)`` for sequence ``i``
        - returns: ``(len(sequences), vocab_size)``

    Raises:
        ValueError: If the model has learned or sinusoidal positions, ALiBi, a window or
            linear attention (`paged_forward` implements rotary positions only).
    """
    if model.positional not in ("rope", "none") or model.kind != "softmax" or _windowed(model):
        raise ValueError(
            f"paged_forward needs a softmax GPT with positional='rope' or 'none' and no window, "
            f"got positional={model.positional!r}, attention={model.kind!r}"
        )
    sizes = [len(tokens) for _, tokens in sequences]
    starts = [cache.lengths[seq_id] for seq_id, _ in sequences]
    slots = torch.cat([cache.append_slots(seq_id, len(tokens)) for seq_id, tokens in sequences])
    positions = torch.cat([torch.arange(s, s + n) for s, n in zip(starts, sizes, strict=True)])
    X = model.embedding(torch.cat([tokens for _, tokens in sequences]))[None]  # (1, T, hidden)
    for layer, blk in enumerate(model.blks):
        heads, H = blk.attention.heads, blk.ln1(X)
        queries, keys, values = heads.project(H, H, H)  # (1, h, T, d), (1, h_kv, T, d) twice
        if blk.attention.rotary:
            queries, keys = apply_rotary(queries, positions), apply_rotary(keys, positions)
        cache.write(layer, slots, keys[0], values[0])
        per_sequence = queries[0].split(sizes, dim=1)  # (h, n_i, d) for each sequence
        outputs = [
            paged_attention(q, cache, layer, seq_id)
            for q, (seq_id, _) in zip(per_sequence, sequences, strict=True)
        ]
        X = X + heads.W_o(merge_heads(torch.cat(outputs, dim=1)[None]))  # (1, T, hidden)
        X = X + blk.ffn(blk.ln2(X))
    last = torch.tensor(sizes).cumsum(0) - 1  # each sequence's last new token
    return model.head(model.ln_f(X[0, last]))  # (len(sequences), vocab_size)


# --8<-- [end:paged_forward]


def _windowed(model: GPT) -> bool:
    attention = model.blks[0].attention if len(model.blks) else None
    return attention is not None and (attention.window is not None or attention.alibi)


# --8<-- [start:serve]
def serve(
    model: GPT,
    requests: list[Request],
    policy: str = "continuous",
    max_batch: int = 8,
    block_size: int = 16,
    eos: int | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> dict:
    """Generate greedily for every request, batching them statically or continuously.

    Every request is there from the start (an offline batch). A request is done when it has
    generated `eos` or its ``max_new_tokens``. The cache has room for `max_batch` requests of
    the largest size. PyTorch runs on one thread (`torch_threads`): these small matrices gain
    nothing from a second, and the timings are steadier.

    Args:
        model: The GPT (softmax attention, rotary or no positions).
        requests: The prompts, served in this order.
        policy: ``"static"`` or ``"continuous"``.
        max_batch: Most sequences in one step.
        block_size: Positions per block of the paged cache.
        eos: The token that ends a sequence, or None.
        clock: ``time.perf_counter`` (wall clock) or ``time.thread_time`` (CPU time of this
            thread, which other processes of a shared machine do not inflate).

    Returns:
        "tokens" (the tokens generated for each request, `eos` included), "start_step" (the
        step that ran each request's prompt), "finish_step" and "finish_seconds" (the step, and
        the seconds since the start, at which each request was done), "steps", "seconds",
        "batch_sizes" (sequences computed at each step) and "peak_blocks" (most blocks in use
        at once).

    Raises:
        ValueError: If `policy` is unknown, `max_batch` or `block_size` is below 1, there is
            no request, or a request has an empty prompt or asks for no token.
    """
    if policy not in POLICIES or max_batch < 1 or not requests:
        raise ValueError(
            f"policy must be one of {POLICIES}, max_batch at least 1 and requests not empty, got "
            f"policy={policy!r}, max_batch={max_batch} and {len(requests)} requests"
        )
    for request in requests:
        if not request.prompt or request.max_new_tokens < 1:
            raise ValueError(f"a request needs a prompt and max_new_tokens >= 1, got {request}")
    longest = max(len(r.prompt) for r in requests) + max(r.max_new_tokens for r in requests)
    blocks_each = -(-longest // max(block_size, 1))  # ceil
    heads = model.blks[0].attention.heads
    weight = heads.W_k.weight
    cache = PagedKVCache(
        max_batch * blocks_each, block_size, len(model.blks), heads.num_kv_heads,
        heads.head_dim, weight.dtype, weight.device,
    )  # fmt: skip
    state = _State(requests, eos)
    model.eval()
    step_fn = _static_steps if policy == "static" else _continuous_steps
    with torch_threads(1):
        start = clock()
        for batch in step_fn(state, max_batch, cache):
            logits = paged_forward(model, cache, batch)  # (len(batch), vocab)
            seconds = clock() - start
            state.record(batch, logits.argmax(dim=-1).tolist(), seconds, cache)
    return {
        "tokens": state.generated,
        "start_step": state.start_step,
        "finish_step": state.finish_step,
        "finish_seconds": state.finish_seconds,
        "steps": state.steps,
        "seconds": seconds,
        "batch_sizes": state.batch_sizes,
        "peak_blocks": state.peak_blocks,
    }


def _continuous_steps(state: _State, max_batch: int, cache: PagedKVCache):
    """Iteration-level scheduling: admit and retire sequences at every step."""
    waiting, running = deque(range(len(state.requests))), []
    while waiting or running:
        running = [i for i in running if not state.done(i)]
        for i in [i for i in state.just_done if i in cache.tables]:
            cache.free_sequence(i)  # retired: its blocks are free for the next request
        state.just_done.clear()
        admitted = []
        while waiting and len(running) + len(admitted) < max_batch:
            admitted.append(waiting.popleft())
            cache.add_sequence(admitted[-1])
        if not running and not admitted:
            return
        yield [*state.prompt_inputs(admitted), *state.next_inputs(running)]
        running += admitted


def _static_steps(state: _State, max_batch: int, cache: PagedKVCache):
    """Request-level scheduling: a batch runs until its last sequence is done."""
    for first in range(0, len(state.requests), max_batch):
        batch = list(range(first, min(first + max_batch, len(state.requests))))
        for i in batch:
            cache.add_sequence(i)
        yield state.prompt_inputs(batch)
        while not all(state.done(i) for i in batch):
            yield state.next_inputs(batch)  # finished sequences are computed and discarded
        for i in batch:
            cache.free_sequence(i)


# --8<-- [end:serve]


# --8<-- [start:parallel_samples]
@torch.no_grad()
def parallel_samples(
    model: GPT,
    prompt: tuple[int, ...],
    num_samples: int,
    max_new_tokens: int,
    share_prompt: bool = True,
    block_size: int = 16,
    seed: int = 0,
) -> dict:
    """Sample several continuations of one prompt, storing the prompt's keys once or each time.

    With `share_prompt`, the prompt is run once and each sample is a fork of it
    (`PagedKVCache.fork`): the prompt's blocks are shared, and a sample's first write into the
    prompt's partly filled last block copies that block. Without it, every sample runs and
    stores the prompt itself. The samples are the same either way (same seed, same logits).

    Args:
        model: The GPT (softmax attention, rotary or no positions).
        prompt: The prompt's tokens.
        num_samples: Number of continuations.
        max_new_tokens: Tokens sampled for each.
        share_prompt: Fork the samples from one copy of the prompt (True) or not.
        block_size: Positions per block.
        seed: Seed of the sampling.

    Returns:
        "tokens" (each sample's tokens), "peak_blocks" (most blocks in use at once) and
        "block_nbytes" (bytes of one block).
    """
    heads = model.blks[0].attention.heads
    blocks_each = -(-(len(prompt) + max_new_tokens) // block_size)
    cache = PagedKVCache(
        num_samples * (blocks_each + 1), block_size, len(model.blks), heads.num_kv_heads,
        heads.head_dim, heads.W_k.weight.dtype,
    )  # fmt: skip
    with torch_threads(1):
        options = (num_samples, max_new_tokens, share_prompt, seed)
        tokens, peak = _sample(model, cache, prompt, *options)
    return {"tokens": tokens, "peak_blocks": peak, "block_nbytes": cache.block_nbytes}


# --8<-- [end:parallel_samples]


def _sample(model, cache, prompt, num_samples, max_new_tokens, share_prompt, seed):
    """The sampling loop of `parallel_samples`: its tokens and the most blocks in use."""
    generator, model = torch.Generator().manual_seed(seed), model.eval()
    samples = list(range(1, num_samples + 1))
    if share_prompt:
        cache.add_sequence(0)
        logits = paged_forward(model, cache, [(0, torch.tensor(prompt))]).expand(num_samples, -1)
        for sample in samples:
            cache.fork(0, sample)
        cache.free_sequence(0)  # the samples hold the prompt's blocks now
    else:
        for sample in samples:
            cache.add_sequence(sample)
        logits = paged_forward(model, cache, [(i, torch.tensor(prompt)) for i in samples])
    tokens, peak = [[] for _ in samples], cache.blocks_in_use()
    for step in range(max_new_tokens):
        probabilities = torch.softmax(logits.double(), dim=-1)  # (num_samples, vocab)
        drawn = torch.multinomial(probabilities, 1, generator=generator)[:, 0].tolist()
        for sample_tokens, token in zip(tokens, drawn, strict=True):
            sample_tokens.append(token)
        if step < max_new_tokens - 1:
            batch = [(i, torch.tensor([t[-1]])) for i, t in zip(samples, tokens, strict=True)]
            logits = paged_forward(model, cache, batch)
            peak = max(peak, cache.blocks_in_use())
    return tokens, peak


class _State:
    """What `serve` knows about each request: its tokens so far and when it was done."""

    def __init__(self, requests: list[Request], eos: int | None):
        self.requests, self.eos = requests, eos
        self.generated: list[list[int]] = [[] for _ in requests]
        self.start_step: list[int | None] = [None] * len(requests)
        self.finish_step: list[int | None] = [None] * len(requests)
        self.finish_seconds: list[float | None] = [None] * len(requests)
        self.steps, self.batch_sizes, self.peak_blocks = 0, [], 0
        self.just_done: list[int] = []

    def done(self, i: int) -> bool:
        return self.finish_step[i] is not None

    def prompt_inputs(self, indices: list[int]) -> list[tuple[int, Tensor]]:
        return [(i, torch.tensor(self.requests[i].prompt)) for i in indices]

    def next_inputs(self, indices: list[int]) -> list[tuple[int, Tensor]]:
        return [(i, torch.tensor(self.generated[i][-1:])) for i in indices]

    def record(self, batch, next_tokens, seconds, cache) -> None:
        self.steps += 1
        self.batch_sizes.append(len(batch))
        self.peak_blocks = max(self.peak_blocks, cache.blocks_in_use())
        for (i, _), token in zip(batch, next_tokens, strict=True):
            if self.done(i):
                continue  # static batching: a finished sequence's token is thrown away
            if not self.generated[i]:
                self.start_step[i] = self.steps
            self.generated[i].append(token)
            limit = len(self.generated[i]) == self.requests[i].max_new_tokens
            if token == self.eos or limit:
                self.finish_step[i], self.finish_seconds[i] = self.steps, seconds
                self.just_done.append(i)
