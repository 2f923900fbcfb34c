import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention_book.vit import (
    PatchEmbedding,
    ViT,
    ViTBlock,
    ViTMLP,
    interpolate_position_embedding,
    mean_attention_distance,
    patch_distances,
)

TOL = {"rtol": 0, "atol": 1e-10}


def randomize_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter (LayerNorm scales and biases too) random values."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=generator, dtype=param.dtype) * 0.5)
    return module


def tiny_vit(**overrides) -> ViT:
    config = dict(
        img_size=16,
        patch_size=4,
        num_hiddens=32,
        mlp_num_hiddens=64,
        num_heads=4,
        num_blks=2,
        emb_dropout=0.0,
        blk_dropout=0.0,
    )
    config.update(overrides)
    return ViT(**config)


# PatchEmbedding --------------------------------------------------------------------------


def test_patch_embedding_d2l_call_shape():
    patch_emb = PatchEmbedding(img_size=96, patch_size=16, num_hiddens=512)
    assert patch_emb.num_patches == 36
    assert patch_emb(torch.zeros(4, 3, 96, 96)).shape == (4, 36, 512)


def patches_by_unfold(X, patch_size):
    return F.unfold(X, kernel_size=patch_size, stride=patch_size).transpose(1, 2)


def patches_by_reshape(X, patch_size):
    batch, channels, height, width = X.shape
    ph, pw = patch_size
    X = X.reshape(batch, channels, height // ph, ph, width // pw, pw)
    X = X.permute(0, 2, 4, 1, 3, 5)  # (batch, rows, cols, channels, ph, pw)
    return X.reshape(batch, (height // ph) * (width // pw), channels * ph * pw)


@pytest.mark.parametrize("cut", [patches_by_unfold, patches_by_reshape])
@pytest.mark.parametrize(
    ("img_size", "patch_size"), [(12, 4), ((8, 12), (4, 3)), ((10, 6), (5, 6))]
)
def test_patch_embedding_is_a_linear_map_of_flattened_patches(cut, img_size, patch_size):
    patch_emb = PatchEmbedding(img_size, patch_size, num_hiddens=7, in_channels=2).double()
    height, width = patch_emb.img_size
    X = torch.randn(3, 2, height, width, dtype=torch.float64)
    patches = cut(X, patch_emb.patch_size)  # (batch, num_patches, channels * ph * pw)
    assert patches.shape[1] == patch_emb.num_patches
    weight = patch_emb.conv.weight.reshape(7, -1)  # (num_hiddens, channels * ph * pw)
    expected = patches @ weight.T + patch_emb.conv.bias
    torch.testing.assert_close(patch_emb(X), expected, **TOL)


def test_patch_embedding_rejects_indivisible_size():
    with pytest.raises(ValueError, match=r"img_size \(30, 30\).*patch_size \(16, 16\)"):
        PatchEmbedding(img_size=30, patch_size=16)
    with pytest.raises(ValueError, match=r"img_size \(32, 30\).*patch_size \(8, 8\)"):
        PatchEmbedding(img_size=(32, 30), patch_size=8)
    with pytest.raises(ValueError, match="patch_size"):
        PatchEmbedding(img_size=32, patch_size=0)


@pytest.mark.parametrize("shape", [(3, 32, 32), (2, 1, 32, 32), (2, 3, 32, 16), (1, 2, 3, 32, 32)])
def test_patch_embedding_rejects_wrong_input_shape(shape):
    patch_emb = PatchEmbedding(img_size=32, patch_size=8, num_hiddens=16)
    expected = r"X must have shape \(batch, in_channels, height, width\) = \(batch, 3, 32, 32\)"
    with pytest.raises(ValueError, match=expected + r".*got " + re.escape(str(shape))):
        patch_emb(torch.zeros(shape))


# ViTMLP and ViTBlock ---------------------------------------------------------------------


def test_vit_mlp_shapes_and_math():
    mlp = ViTMLP(48, 24, 0.5)
    mlp.eval()
    assert mlp(torch.ones((2, 100, 24))).shape == (2, 100, 24)
    mlp = ViTMLP(48, 5, 0.0, mlp_num_inputs=3).double()
    X = torch.randn(2, 4, 3, dtype=torch.float64)
    hidden = F.gelu(X @ mlp.dense1.weight.T + mlp.dense1.bias)
    torch.testing.assert_close(mlp(X), hidden @ mlp.dense2.weight.T + mlp.dense2.bias, **TOL)


def test_vit_mlp_dropout_is_active_in_training():
    torch.manual_seed(0)
    mlp = ViTMLP(64, 16, 0.5)
    X = torch.randn(8, 16)
    assert not torch.equal(mlp(X), mlp(X))
    mlp.eval()
    assert torch.equal(mlp(X), mlp(X))


def copy_(ours: nn.Module, theirs: nn.Module) -> None:
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
        theirs.bias.copy_(ours.bias)


@pytest.mark.parametrize("padded", [False, True])
def test_vit_block_matches_torch_pre_norm_gelu_encoder_layer(padded):
    num_hiddens, num_heads, mlp_num_hiddens = 16, 4, 40
    ours = ViTBlock(num_hiddens, num_hiddens, mlp_num_hiddens, num_heads, 0.0, use_bias=True)
    ours = randomize_(ours.double())
    theirs = nn.TransformerEncoderLayer(
        num_hiddens,
        num_heads,
        mlp_num_hiddens,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
        dtype=torch.float64,
    )
    attention = ours.self_attention
    with torch.no_grad():
        theirs.self_attn.in_proj_weight.copy_(
            torch.cat([attention.W_q.weight, attention.W_k.weight, attention.W_v.weight])
        )
        theirs.self_attn.in_proj_bias.copy_(
            torch.cat([attention.W_q.bias, attention.W_k.bias, attention.W_v.bias])
        )
    copy_(attention.W_o, theirs.self_attn.out_proj)
    copy_(ours.ln1, theirs.norm1)
    copy_(ours.ln2, theirs.norm2)
    copy_(ours.mlp.dense1, theirs.linear1)
    copy_(ours.mlp.dense2, theirs.linear2)
    X = torch.randn(3, 7, num_hiddens, dtype=torch.float64)
    valid_lens = torch.tensor([7, 3, 5]) if padded else None
    mask = torch.arange(7)[None, :] >= valid_lens[:, None] if padded else None
    torch.testing.assert_close(ours(X, valid_lens), theirs(X, src_key_padding_mask=mask), **TOL)


def test_vit_block_d2l_call_shape():
    X = torch.ones((2, 100, 24))
    blk = ViTBlock(24, 24, 48, 8, 0.5)
    blk.eval()
    assert blk(X).shape == X.shape


# ViT -------------------------------------------------------------------------------------


def test_vit_shapes_and_attention_weights():
    vit = tiny_vit(num_classes=7)
    logits = vit(torch.randn(5, 3, 16, 16))
    assert logits.shape == (5, 7)
    assert vit.cls_token.shape == (1, 1, 32)
    assert vit.pos_embedding.P.shape == (1, 16 + 1, 32)
    assert [w.shape for w in vit.attention_weights] == [(5, 4, 17, 17)] * 2


def test_vit_non_square_images_and_channels():
    vit = tiny_vit(img_size=(8, 20), patch_size=(4, 5), in_channels=1, num_classes=3)
    assert vit.patch_embedding.num_patches == 8
    assert vit(torch.randn(2, 1, 8, 20)).shape == (2, 3)


def test_vit_head_reads_the_class_token():
    vit = tiny_vit()
    seen = {}
    vit.blks[-1].register_forward_hook(lambda module, args, out: seen.update(blocks=out))
    vit.head.register_forward_hook(lambda module, args, out: seen.update(head_input=args[0]))
    vit(torch.randn(2, 3, 16, 16))
    assert torch.equal(seen["head_input"], seen["blocks"][:, 0])


def test_vit_class_token_is_learned():
    vit = tiny_vit()
    vit(torch.randn(2, 3, 16, 16)).sum().backward()
    assert vit.cls_token.grad is not None and vit.cls_token.grad.abs().sum() > 0
    assert vit.pos_embedding.P.grad.abs().sum() > 0


def test_vit_one_optimizer_step_lowers_the_loss():
    torch.manual_seed(0)
    vit = tiny_vit()
    images, labels = torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))
    optimizer = torch.optim.Adam(vit.parameters(), lr=1e-3)
    loss = F.cross_entropy(vit(images), labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        new_loss = F.cross_entropy(vit(images), labels)
    assert new_loss < loss.detach()


@pytest.mark.parametrize(
    ("shape", "got"),
    [((3, 16, 16), r"\(3, 16, 16\)"), ((2, 1, 16, 16), r"\(2, 1, 16, 16\)")],
)
def test_vit_rejects_wrong_dims_and_channels(shape, got):
    with pytest.raises(ValueError, match=r"X must have shape.*\(batch, 3, 16, 16\).*" + got):
        tiny_vit()(torch.randn(shape))


def test_vit_rejects_indivisible_image_size():
    with pytest.raises(ValueError, match=r"img_size \(18, 18\).*patch_size \(4, 4\)"):
        tiny_vit(img_size=18)


def test_d2l_positional_signature_including_lr():
    # ViT(img_size, patch_size, num_hiddens, mlp_num_hiddens, num_heads, num_blks,
    #     emb_dropout, blk_dropout, lr, use_bias, num_classes), as d2l calls it.
    model = ViT(16, 4, 32, 64, 4, 2, 0.1, 0.1, 0.05, True, 7)
    assert model.lr == 0.05
    assert model.blks[0].self_attention.W_q.bias is not None
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 7)
    with pytest.raises(TypeError):
        ViT(16, 4, 32, 64, 4, 2, 0.1, 0.1, 0.05, True, 7, 1)  # in_channels is keyword-only
    with pytest.raises(TypeError):
        PatchEmbedding(16, 4, 32, 1)
    with pytest.raises(TypeError):
        ViTMLP(48, 24, 0.5, 24)


# Masks in ViTBlock ------------------------------------------------------------------------


def torch_pre_norm_layer(ours: ViTBlock, num_hiddens: int, num_heads: int, mlp_num_hiddens: int):
    """nn.TransformerEncoderLayer holding the same weights as a ViTBlock (use_bias=True)."""
    theirs = nn.TransformerEncoderLayer(
        num_hiddens,
        num_heads,
        mlp_num_hiddens,
        dropout=0.0,
        activation="gelu",
        batch_first=True,
        norm_first=True,
        dtype=torch.float64,
    )
    attention = ours.self_attention
    with torch.no_grad():
        theirs.self_attn.in_proj_weight.copy_(
            torch.cat([attention.W_q.weight, attention.W_k.weight, attention.W_v.weight])
        )
        theirs.self_attn.in_proj_bias.copy_(
            torch.cat([attention.W_q.bias, attention.W_k.bias, attention.W_v.bias])
        )
    copy_(attention.W_o, theirs.self_attn.out_proj)
    copy_(ours.ln1, theirs.norm1)
    copy_(ours.ln2, theirs.norm2)
    copy_(ours.mlp.dense1, theirs.linear1)
    copy_(ours.mlp.dense2, theirs.linear2)
    return theirs


def test_vit_block_3d_mask_matches_torch_with_one_mask_per_head():
    # A different mask per sequence; PyTorch wants it repeated per head, batch-major, and
    # True = "ignore"; the book's block takes (batch, n, n) with True = "may attend".
    num_hiddens, num_heads, mlp_num_hiddens, n = 16, 4, 40, 6
    ours = randomize_(
        ViTBlock(num_hiddens, num_hiddens, mlp_num_hiddens, num_heads, 0.0, use_bias=True).double()
    )
    theirs = torch_pre_norm_layer(ours, num_hiddens, num_heads, mlp_num_hiddens)
    generator = torch.Generator().manual_seed(0)
    allowed = torch.rand(3, n, n, generator=generator) < 0.6  # (batch, n, n)
    allowed |= torch.eye(n, dtype=torch.bool)  # every position sees itself: no empty row
    X = torch.randn(3, n, num_hiddens, dtype=torch.float64)
    per_head = (~allowed).repeat_interleave(num_heads, dim=0)  # (batch * num_heads, n, n)
    expected = theirs(X, src_mask=per_head)
    torch.testing.assert_close(ours(X, attn_mask=allowed), expected, **TOL)
    # The same mask as a (batch, num_heads, n, n) tensor gives the same result.
    four_d = allowed[:, None].expand(-1, num_heads, -1, -1)
    torch.testing.assert_close(ours(X, attn_mask=four_d), expected, **TOL)
    # repeat (head-major) instead of repeat_interleave would give sequence 0 the mask of 1.
    wrong = theirs(X, src_mask=(~allowed).repeat(num_heads, 1, 1))
    assert not torch.allclose(wrong, expected)


def test_vit_block_key_mask_equals_valid_lens():
    blk = randomize_(ViTBlock(16, 16, 32, 4, 0.0).double())
    X = torch.randn(2, 5, 16, dtype=torch.float64)
    valid_lens = torch.tensor([5, 3])
    key_mask = torch.arange(5)[None, :] < valid_lens[:, None]  # (batch, n): True = a real key
    by_mask = blk(X, attn_mask=key_mask[:, None, :])  # (batch, 1, n): one flag per key
    torch.testing.assert_close(by_mask, blk(X, valid_lens), **TOL)


def test_d2l_style_vit_block_mask_fails_with_several_heads():
    # The d2l-style code the chapter started from passes a (batch, n, n) mask to
    # nn.MultiheadAttention, which needs (batch * num_heads, n, n) as soon as there is more
    # than one head.
    attention = nn.MultiheadAttention(embed_dim=8, num_heads=4, bias=False)
    X = torch.randn(5, 2, 8)  # (n, batch, embed_dim): that code transposes to this layout
    mask = torch.zeros(2, 5, 5, dtype=torch.bool)
    with pytest.raises(RuntimeError, match=r"should be \(8, 5, 5\)"):
        attention(X, X, X, attn_mask=mask)


def test_vit_block_rejects_malformed_masks():
    blk = ViTBlock(16, 16, 32, 4, 0.0)
    X = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match="bool"):
        blk(X, attn_mask=torch.ones(2, 5, 5))
    with pytest.raises(ValueError, match=r"attn_mask of shape \(2, 1, 4, 5\) does not broadcast"):
        blk(X, attn_mask=torch.ones(2, 4, 5, dtype=torch.bool))


# Interpolating the position table -----------------------------------------------------------


def test_interpolate_position_embedding_shape_and_class_row():
    torch.manual_seed(0)
    table = torch.randn(1, 1 + 4 * 4, 8)  # <cls>, then a 4x4 grid of patches
    for mode in ("bicubic", "bilinear"):
        resized = interpolate_position_embedding(table, 4, 6, mode=mode)
        assert resized.shape == (1, 1 + 6 * 6, 8)
        assert torch.equal(resized[:, 0], table[:, 0])  # the class token's row, untouched
    rectangular = interpolate_position_embedding(table, (4, 4), (2, 8))
    assert rectangular.shape == (1, 1 + 2 * 8, 8)
    no_prefix = interpolate_position_embedding(table[:, 1:], 4, 2, num_prefix_tokens=0)
    assert no_prefix.shape == (1, 4, 8)
    two_prefix = interpolate_position_embedding(torch.randn(1, 2 + 9, 8), 3, 5, num_prefix_tokens=2)
    assert two_prefix.shape == (1, 2 + 25, 8)


def test_interpolate_position_embedding_is_the_identity_on_the_same_grid():
    torch.manual_seed(0)
    table = torch.randn(1, 1 + 3 * 5, 6, dtype=torch.float64)
    for mode in ("bicubic", "bilinear"):
        assert torch.equal(interpolate_position_embedding(table, (3, 5), (3, 5), mode=mode), table)


def test_interpolate_position_embedding_follows_the_grid_in_row_major_order():
    # Each patch's row says its row on the grid: 0 for the first 4 patches, 1 for the next 4...
    rows = torch.arange(4.0).repeat_interleave(4)  # (16,), row-major: constant along a row
    table = torch.cat([torch.tensor([-5.0]), rows]).reshape(1, 17, 1)  # <cls> = -5
    resized = interpolate_position_embedding(table, 4, 8, mode="bilinear")[0, 1:, 0]
    grid = resized.reshape(8, 8)  # (new rows, new cols)
    assert torch.all(grid == grid[:, :1])  # still constant along every row
    assert torch.all(grid[1:, 0] >= grid[:-1, 0]) and grid[-1, 0] > grid[0, 0]  # rising down
    assert grid.min() >= 0 and grid.max() <= 3  # interpolated, not extrapolated
    constant = interpolate_position_embedding(torch.full((1, 17, 3), 0.25), 4, 7)
    torch.testing.assert_close(constant, torch.full((1, 50, 3), 0.25))


def test_interpolated_table_lets_a_vit_read_larger_images():
    torch.manual_seed(0)
    small, large = tiny_vit(img_size=16), tiny_vit(img_size=24)  # 4x4 and 6x6 patches of 4x4
    state = small.state_dict()
    state["pos_embedding.P"] = interpolate_position_embedding(state["pos_embedding.P"], 4, 6)
    large.load_state_dict(state)
    assert large(torch.randn(2, 3, 24, 24)).shape == (2, 10)


def test_interpolate_position_embedding_rejects_bad_input():
    table = torch.zeros(1, 17, 8)
    with pytest.raises(ValueError, match=r"\(1, 1 \+ 4 \* 4, num_hiddens\).*got \(1, 16, 8\)"):
        interpolate_position_embedding(torch.zeros(1, 16, 8), 4, 6)  # the class row is missing
    with pytest.raises(ValueError, match=r"got \(17, 8\)"):
        interpolate_position_embedding(torch.zeros(17, 8), 4, 6)
    with pytest.raises(ValueError, match=r"got \(2, 17, 8\)"):
        interpolate_position_embedding(torch.zeros(2, 17, 8), 4, 6)
    with pytest.raises(ValueError, match="new_grid must be a positive int"):
        interpolate_position_embedding(table, 4, 0)
    with pytest.raises(ValueError, match="old_grid must be a positive int"):
        interpolate_position_embedding(table, (4, 4, 1), 6)
    with pytest.raises(ValueError, match="mode must be 'bicubic' or 'bilinear', got 'nearest'"):
        interpolate_position_embedding(table, 4, 6, mode="nearest")
    with pytest.raises(ValueError, match="num_prefix_tokens must be an int >= 0, got -1"):
        interpolate_position_embedding(table, 4, 6, num_prefix_tokens=-1)
    with pytest.raises(ValueError, match=r"floating point, got torch\.int64"):
        interpolate_position_embedding(torch.zeros(1, 17, 8, dtype=torch.long), 4, 6)


# Mean attention distance -----------------------------------------------------------------


def test_patch_distances_of_a_small_grid():
    distances = patch_distances((2, 3), (4, 2))  # 2 rows of 4 pixels, 3 columns of 2 pixels
    assert distances.shape == (6, 6)
    assert distances[0, 1] == 2.0 and distances[0, 3] == 4.0  # right neighbour, neighbour below
    torch.testing.assert_close(distances[0, 5], torch.tensor(32.0, dtype=torch.float64).sqrt())
    torch.testing.assert_close(distances, distances.T)
    assert torch.all(distances.diagonal() == 0)


def test_mean_attention_distance_of_known_patterns():
    grid, patch, num_heads = 3, 2, 3
    n = grid * grid
    distances = patch_distances(grid, patch)
    weights = torch.zeros(2, num_heads, 1 + n, 1 + n)
    weights[:, 0, 1:, 1:] = torch.eye(n)  # head 0: each patch looks at itself
    weights[:, 1, 1:, 1:] = 1 / n  # head 1: uniform over the patches
    weights[:, 2, 1:, 1:] = 0.5 / n  # head 2: uniform, and half of the weight on <cls>
    weights[:, 2, 1:, 0] = 0.5
    result = mean_attention_distance(weights, grid, patch)
    assert result.shape == (num_heads,)
    assert result[0] == 0
    torch.testing.assert_close(result[1], distances.mean())
    torch.testing.assert_close(result[2], result[1])  # <cls> weight is left out, renormalized


def test_mean_attention_distance_rejects_wrong_shapes():
    with pytest.raises(ValueError, match=r"num_steps = 1 \+ 16 patches = 17, got \(2, 4, 16, 16\)"):
        mean_attention_distance(torch.zeros(2, 4, 16, 16), 4, 2)
    with pytest.raises(ValueError, match="got"):
        mean_attention_distance(torch.zeros(4, 17, 17), 4, 2)
