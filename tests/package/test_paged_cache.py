import pytest
import torch
import torch.nn.functional as F

from attention_book.masking import causal_mask
from attention_book.paged_cache import PagedKVCache, paged_attention

HEADS, KV_HEADS, HEAD_DIM = 4, 2, 8


def new_cache(num_blocks=16, block_size=4, layers=2):
    return PagedKVCache(num_blocks, block_size, layers, KV_HEADS, HEAD_DIM, torch.float64)


def fill(cache, seq_id, n, layer=0, seed=0):
    """Append n random positions to a sequence; return their keys and values."""
    generator = torch.Generator().manual_seed(seed)
    keys, values = torch.randn(2, KV_HEADS, n, HEAD_DIM, dtype=torch.float64, generator=generator)
    slots = cache.append_slots(seq_id, n)
    cache.write(layer, slots, keys, values)
    return keys, values


def test_interleaved_sequences_read_back_what_they_wrote():
    cache = new_cache()
    cache.add_sequence(0)
    cache.add_sequence(1)
    written = {0: [], 1: []}
    for seq_id, n in [(0, 3), (1, 6), (0, 4), (1, 1), (0, 2)]:  # blocks end up interleaved
        written[seq_id].append(fill(cache, seq_id, n, seed=n + 10 * seq_id))
    assert cache.tables == {0: [0, 3, 4], 1: [1, 2]}  # interleaved in the pool
    for seq_id, parts in written.items():
        keys, values = cache.read(0, seq_id)
        assert torch.equal(keys, torch.cat([k for k, _ in parts], dim=1))
        assert torch.equal(values, torch.cat([v for _, v in parts], dim=1))


def test_paged_attention_equals_causal_attention_on_the_contiguous_keys():
    cache = new_cache()
    for seq_id in range(3):
        cache.add_sequence(seq_id)
    pieces = {s: [fill(cache, s, n, seed=s * 7 + n) for n in (5, 2, 1)] for s in range(3)}
    generator = torch.Generator().manual_seed(3)
    for seq_id, parts in pieces.items():
        keys = torch.cat([k for k, _ in parts], dim=1).repeat_interleave(HEADS // KV_HEADS, dim=0)
        values = torch.cat([v for _, v in parts], dim=1).repeat_interleave(HEADS // KV_HEADS, 0)
        queries = torch.randn(HEADS, 3, HEAD_DIM, dtype=torch.float64, generator=generator)
        mask = causal_mask(3, keys.shape[1], alignment="bottom-right")  # the last 3 positions
        expected = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask)
        got = paged_attention(queries, cache, 0, seq_id)
        assert (got - expected).abs().max() < 1e-12


def test_blocks_are_taken_when_needed_and_freed_for_reuse():
    cache = new_cache(num_blocks=4, block_size=4)
    cache.add_sequence(0)
    assert cache.blocks_in_use() == 0  # an empty sequence holds no block
    cache.append_slots(0, 4)
    assert cache.blocks_in_use() == 1  # exactly full: no block reserved ahead
    cache.append_slots(0, 1)
    assert cache.blocks_in_use() == 2 and cache.lengths[0] == 5
    cache.free_sequence(0)
    assert cache.blocks_in_use() == 0 and sorted(cache.free) == [0, 1, 2, 3]
    cache.add_sequence(1)
    assert cache.append_slots(1, 2).tolist() == [0, 1]  # block 0 again, from the free list


def test_fork_shares_blocks_and_copies_the_shared_last_block_on_write():
    cache = new_cache(num_blocks=8, block_size=4)
    cache.add_sequence(0)
    prompt_keys, _ = fill(cache, 0, 6)  # blocks 0 (full) and 1 (2 of 4 positions)
    cache.fork(0, 1)
    cache.fork(0, 2)
    assert cache.tables[1] == cache.tables[2] == [0, 1]
    assert cache.ref_counts[:2] == [3, 3] and cache.blocks_in_use() == 2
    child_keys, _ = fill(cache, 1, 1, seed=5)  # child 1 writes into the shared block 1
    assert cache.tables[1] == [0, 2] and cache.ref_counts[:3] == [3, 2, 1]
    assert torch.equal(cache.read(0, 0)[0], prompt_keys)  # the parent is untouched
    assert torch.equal(cache.read(0, 1)[0], torch.cat([prompt_keys, child_keys], dim=1))
    assert torch.equal(cache.read(1, 1)[0][:, :6], cache.read(1, 0)[0])  # every layer copied
    for seq_id in (0, 1, 2):
        cache.free_sequence(seq_id)
    assert cache.blocks_in_use() == 0 and cache.ref_counts == [0] * 8


def test_a_full_cache_says_which_argument_is_too_small():
    cache = new_cache(num_blocks=2, block_size=4)
    cache.add_sequence(0)
    cache.append_slots(0, 7)
    with pytest.raises(ValueError, match=r"out of blocks: seq_id=0 needs 1 more of .*num_blocks=2"):
        cache.append_slots(0, 2)
    assert cache.lengths[0] == 7  # nothing changed


def test_copy_on_write_needs_a_free_block_too():
    cache = new_cache(num_blocks=2, block_size=4)
    cache.add_sequence(0)
    cache.append_slots(0, 6)
    cache.fork(0, 1)
    with pytest.raises(ValueError, match="out of blocks: seq_id=1 needs 1 more"):
        cache.append_slots(1, 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"block_size": 0}, "block_size=0"), ({"num_blocks": 0}, "num_blocks=0")],
)
def test_sizes_below_one_are_rejected_by_name(kwargs, message):
    arguments = {"num_blocks": 4, "block_size": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        PagedKVCache(arguments["num_blocks"], arguments["block_size"], 1, 1, 4)


def test_unknown_and_duplicate_sequences_are_named():
    cache = new_cache()
    cache.add_sequence(0)
    with pytest.raises(ValueError, match="seq_id=0 is already in the cache"):
        cache.add_sequence(0)
    with pytest.raises(ValueError, match=r"seq_id=5 is not in the cache.*\[0\]"):
        cache.append_slots(5, 1)
    with pytest.raises(ValueError, match="seq_id=5 is not in the cache"):
        cache.free_sequence(5)
    with pytest.raises(ValueError, match="cannot fork parent=3 into child=4"):
        cache.fork(3, 4)


def test_block_nbytes_counts_keys_and_values_of_every_layer():
    cache = new_cache(num_blocks=3, block_size=4, layers=2)
    assert cache.block_nbytes == 2 * 2 * 4 * KV_HEADS * HEAD_DIM * 8
    assert cache.block_nbytes * cache.num_blocks == cache.keys.nbytes + cache.values.nbytes
