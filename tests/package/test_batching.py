import pytest
import torch

from attention_book.batching import Request, paged_forward, parallel_samples, serve
from attention_book.gpt import GPT
from attention_book.paged_cache import PagedKVCache
from attention_book.timing import torch_threads

VOCAB, EOS = 20, 3


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):  # small matrices: a second thread only waits on a loaded machine
        yield


def small_gpt(**kwargs):
    torch.manual_seed(0)
    return GPT(VOCAB, 32, 4, 2, **kwargs).double().eval()


def workload(count=11, seed=1):
    generator = torch.Generator().manual_seed(seed)
    requests = []
    for _ in range(count):
        length = int(torch.randint(1, 12, (1,), generator=generator))
        prompt = torch.randint(VOCAB, (length,), generator=generator).tolist()
        max_new_tokens = int(torch.randint(1, 15, (1,), generator=generator))
        requests.append(Request(tuple(prompt), max_new_tokens))
    return requests


@pytest.mark.parametrize("kwargs", [{}, {"num_kv_heads": 2}, {"positional": "none"}])
def test_paged_forward_gives_the_logits_of_the_gpt_with_its_contiguous_cache(kwargs):
    model = small_gpt(**kwargs)
    generator = torch.Generator().manual_seed(2)
    lengths = (7, 3, 9)
    sequences = {i: torch.randint(VOCAB, (n,), generator=generator) for i, n in enumerate(lengths)}
    heads = model.blks[0].attention.heads
    paged = PagedKVCache(32, 4, 2, heads.num_kv_heads, heads.head_dim, torch.float64)
    contiguous = {i: model.new_cache(1, 12) for i in sequences}
    for i in sequences:
        paged.add_sequence(i)
    # Step 1: each sequence's prompt (its first 2 tokens, or all 3); then one token at a time,
    # all sequences in one call each step, at different positions.
    done = dict.fromkeys(sequences, 0)
    for step in range(8):
        batch = []
        for i, tokens in sequences.items():
            n = 2 if step == 0 else 1
            if done[i] + n <= len(tokens):
                batch.append((i, tokens[done[i] : done[i] + n]))
        logits = paged_forward(model, paged, batch)
        for row, (i, new) in enumerate(batch):
            with torch.no_grad():
                expected = model(new[None], contiguous[i])[0, -1]
            assert (logits[row] - expected).abs().max() < 1e-12, (step, i)
            done[i] += len(new)


@pytest.mark.parametrize("policy", ["static", "continuous"])
def test_serving_generates_the_tokens_of_each_sequence_alone(policy):
    model, requests = small_gpt(num_kv_heads=2), workload()
    result = serve(model, requests, policy, max_batch=3, block_size=4, eos=EOS)
    assert max(result["batch_sizes"]) == 3
    for request, tokens in zip(requests, result["tokens"], strict=True):
        alone = model.generate(torch.tensor(request.prompt)[None], len(tokens))
        assert alone[0, len(request.prompt) :].tolist() == tokens
        ended = tokens[-1] == EOS or len(tokens) == request.max_new_tokens
        assert ended and EOS not in tokens[:-1]


def test_continuous_batching_retires_and_admits_at_every_step():
    model, requests = small_gpt(), workload()
    static = serve(model, requests, "static", max_batch=3, block_size=4, eos=EOS)
    continuous = serve(model, requests, "continuous", max_batch=3, block_size=4, eos=EOS)
    assert static["tokens"] == continuous["tokens"]
    assert continuous["steps"] < static["steps"]
    # Static batching keeps a batch of 3 until its longest sequence ends: requests 3 to 5
    # cannot start before the slowest of requests 0 to 2 is done.
    first_batch_end = max(static["finish_step"][:3])
    assert min(static["finish_step"][3:6]) > first_batch_end
    # Continuous batching gives a freed place to the next request at the next step.
    first_done = min(continuous["finish_step"][:3])
    assert continuous["batch_sizes"][first_done] == 3  # the batch is full again at once


def test_serve_rejects_bad_arguments_by_name():
    model, requests = small_gpt(), workload(2)
    with pytest.raises(ValueError, match="policy must be one of"):
        serve(model, requests, "dynamic")
    with pytest.raises(ValueError, match="max_batch=0"):
        serve(model, requests, max_batch=0)
    with pytest.raises(ValueError, match="block_size=0"):
        serve(model, requests, block_size=0)
    with pytest.raises(ValueError, match=r"requests not empty, got.*and 0 requests"):
        serve(model, [])
    with pytest.raises(ValueError, match="needs a prompt and max_new_tokens >= 1"):
        serve(model, [Request((), 4)])


def test_paged_forward_says_which_models_it_cannot_run():
    model = small_gpt(positional="learned")
    cache = PagedKVCache(4, 4, 2, 4, 8, torch.float64)
    cache.add_sequence(0)
    with pytest.raises(ValueError, match="positional='learned'"):
        paged_forward(model, cache, [(0, torch.tensor([1, 2]))])


def test_parallel_samples_share_the_prompt_and_draw_the_same_tokens():
    model = small_gpt(num_kv_heads=2)
    prompt = tuple(range(1, 11))  # 10 tokens: blocks of 4 hold it in 2 full blocks and a half
    shared = parallel_samples(model, prompt, 4, 9, share_prompt=True, block_size=4, seed=3)
    copied = parallel_samples(model, prompt, 4, 9, share_prompt=False, block_size=4, seed=3)
    assert shared["tokens"] == copied["tokens"]
    assert len({tuple(t) for t in shared["tokens"]}) > 1  # they are samples, not copies
    # 19 positions per sample: 5 blocks each if stored apart; shared: the 2 full prompt blocks
    # once, and 3 of its own for each sample (the half block copied on its first write).
    assert copied["peak_blocks"] == 4 * 5
    assert shared["peak_blocks"] == 2 + 4 * 3


def test_each_request_runs_from_its_start_step_to_its_finish_step():
    model, requests = small_gpt(), workload()
    for policy in ("static", "continuous"):
        result = serve(model, requests, policy, max_batch=3, block_size=4, eos=EOS)
        for start, finish, tokens in zip(
            result["start_step"], result["finish_step"], result["tokens"], strict=True
        ):
            assert finish - start + 1 == len(tokens)  # a token per step, the first with the prompt
