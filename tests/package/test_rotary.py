import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book.positional import sinusoidal_table
from attention_book.rotary import apply_rotary, rotary_angles

F64 = torch.float64


def complex_reference(x, positions, base=10000.0):
    """RoPE as RoFormer writes it for d = 2: multiply the complex number x[2i] + i x[2i+1]
    by exp(i p theta_i), theta_i = base^(-2i/d)."""
    d = x.shape[-1]
    theta = base ** (-torch.arange(0, d, 2, dtype=F64) / d)  # (d/2,)
    rotation = torch.polar(
        torch.ones(len(positions), d // 2, dtype=F64), positions[:, None] * theta
    )
    z = torch.view_as_complex(x.to(F64).unflatten(-1, (-1, 2)).contiguous())  # (..., n, d/2)
    return torch.view_as_real(z * rotation).flatten(-2)  # (..., n, d)


def rotate_half_reference(x, positions, base=10000.0):
    """The GPT-NeoX / Hugging Face convention: feature i is paired with feature i + d/2."""
    d = x.shape[-1]
    angles = rotary_angles(positions, d, base)  # (n, d/2)
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)  # (n, d)
    first, second = x[..., : d // 2], x[..., d // 2 :]
    return x * cos + torch.cat([-second, first], dim=-1) * sin


# ---------------------------------------------------------------- shapes, dtypes, identities


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(5, 8), (2, 5, 8), (2, 3, 5, 4)])
def test_shape_and_dtype_kept(shape, dtype):
    x = torch.randn(shape).to(dtype)
    y = apply_rotary(x, torch.arange(shape[-2]))
    assert y.shape == x.shape and y.dtype == dtype


def test_position_zero_is_the_identity_and_others_are_not():
    x = torch.randn(2, 4, 6, 8, dtype=F64)
    y = apply_rotary(x, torch.zeros(6, dtype=torch.long))
    torch.testing.assert_close(y, x, rtol=0, atol=0)
    assert not torch.allclose(apply_rotary(x, torch.arange(6)), x)


def test_angles_are_the_sinusoidal_frequencies():
    """sin and cos of RoPE's angles are the columns of the sinusoidal table (Vaswani et al.)."""
    angles = rotary_angles(torch.arange(50), 16)
    assert angles.shape == (50, 8) and angles.dtype == F64
    table = sinusoidal_table(50, 16, dtype=F64)
    torch.testing.assert_close(angles.sin(), table[:, 0::2], rtol=0, atol=1e-12)
    torch.testing.assert_close(angles.cos(), table[:, 1::2], rtol=0, atol=1e-12)


def test_equals_complex_number_reference():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 40, 16, dtype=F64)
    positions = torch.arange(100, 140)
    torch.testing.assert_close(
        apply_rotary(x, positions), complex_reference(x, positions), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(
        apply_rotary(x, positions, base=500.0),
        complex_reference(x, positions, base=500.0),
        rtol=0,
        atol=1e-12,
    )


def test_half_split_convention_is_a_permutation_of_ours():
    """Pairing (i, i + d/2) instead of (2i, 2i + 1) is the same rotation on permuted features."""
    torch.manual_seed(1)
    d = 12
    x = torch.randn(3, 7, d, dtype=F64)
    positions = torch.arange(7) * 5
    interleave = torch.stack([torch.arange(d // 2), torch.arange(d // 2) + d // 2], -1).flatten()
    # x[..., interleave] puts half-split pairs next to each other
    ours = apply_rotary(x[..., interleave], positions)
    theirs = rotate_half_reference(x, positions)[..., interleave]
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


def test_norms_preserved():
    torch.manual_seed(2)
    x = torch.randn(4, 100, 32, dtype=F64)
    y = apply_rotary(x, torch.arange(100) * 37)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), rtol=0, atol=1e-12)
    pair_norms_x, pair_norms_y = (t.unflatten(-1, (-1, 2)).norm(dim=-1) for t in (x, y))
    torch.testing.assert_close(pair_norms_y, pair_norms_x, rtol=0, atol=1e-12)  # each pair alone


# ---------------------------------------------------------------- relative positions


@given(p=st.integers(0, 5000), r=st.integers(0, 5000), shift=st.integers(0, 5000))
@settings(max_examples=50, deadline=None)
def test_score_depends_only_on_the_offset(p, r, shift):
    generator = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 1, 64, dtype=F64, generator=generator)

    def score(a, b):
        return (apply_rotary(q, torch.tensor([a])) * apply_rotary(k, torch.tensor([b]))).sum()

    torch.testing.assert_close(score(p, r), score(p + shift, r + shift), rtol=0, atol=1e-9)
    # the same score as rotating only the query, by the offset (for p >= r)
    if p >= r:
        torch.testing.assert_close(score(p, r), score(p - r, 0), rtol=0, atol=1e-9)


def test_scores_of_a_sequence_are_a_function_of_the_offset():
    """All n x n scores of rotated queries and keys: constant along each diagonal."""
    torch.manual_seed(4)
    q, k = torch.randn(1, 32, dtype=F64), torch.randn(1, 32, dtype=F64)
    n = 20
    Q = apply_rotary(q.expand(n, -1), torch.arange(n))  # the same query at every position
    K = apply_rotary(k.expand(n, -1), torch.arange(n))
    scores = Q @ K.T  # (n, n): scores[i, j] = f(i - j)
    for offset in range(-n + 1, n):
        diagonal = torch.diagonal(scores, offset=-offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), rtol=0, atol=1e-12)
    assert torch.unique(scores.round(decimals=6)).numel() > n  # not constant everywhere


def test_without_rotation_scores_do_not_depend_on_position_only_through_offset():
    """A control: additive sinusoidal encodings do not have the offset property."""
    torch.manual_seed(5)
    q, k = torch.randn(32, dtype=F64), torch.randn(32, dtype=F64)
    table = sinusoidal_table(200, 32, dtype=F64)

    def score(a, b):
        return (q + table[a]) @ (k + table[b])

    assert abs(score(3, 1) - score(103, 101)) > 1e-3


# ---------------------------------------------------------------- bad input


def test_bad_input():
    x = torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"head_dim even.*\(2, 5, 7\)"):
        apply_rotary(torch.randn(2, 5, 7), torch.arange(5))
    with pytest.raises(ValueError, match=r"x must have shape.*\(8,\)"):
        apply_rotary(torch.randn(8), torch.arange(1))
    with pytest.raises(ValueError, match=r"positions must be integers of shape \(n,\) = \(5,\)"):
        apply_rotary(x, torch.arange(4))
    with pytest.raises(ValueError, match=r"dtype torch.float32"):
        apply_rotary(x, torch.arange(5.0))
    with pytest.raises(ValueError, match=r"dtype torch.bool"):
        apply_rotary(x, torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"head_dim must be even and positive.*got 5"):
        rotary_angles(torch.arange(3), 5)
    with pytest.raises(ValueError, match=r"positions must have shape \(n,\), got \(1, 3\)"):
        rotary_angles(torch.arange(3)[None], 4)
