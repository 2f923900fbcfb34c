import pytest
import torch

from attention_book.validation import (
    check_attention_inputs,
    check_bool_mask,
    check_dims,
    check_hidden_states,
    check_keys_values,
    check_leading_axes,
    check_sequence_lengths,
    check_tokens,
    check_valid_lens,
)


def test_valid_input_passes_every_check():
    X = torch.zeros(2, 3, 4)
    check_dims("X", X, (3, 4), "(batch, n, d)")
    check_keys_values(X, torch.zeros(2, 3, 5))
    check_leading_axes(torch.zeros(2, 1, 4), X, X)
    assert torch.equal(check_valid_lens([1, 0], 2, 3), torch.tensor([1, 0]))
    check_valid_lens(torch.zeros(2, 3, dtype=torch.long), 2, 3)
    check_bool_mask(torch.ones(3, 3, dtype=torch.bool))
    tokens = torch.zeros(2, 5, dtype=torch.long)
    check_tokens("src", tokens)
    check_sequence_lengths("valid_lens", torch.tensor([1, 5]), tokens)
    check_sequence_lengths("valid_lens", None, tokens)
    check_hidden_states("X", X, 4)


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (
            lambda: check_dims("X", torch.zeros(2, 3), (3, 4), "(batch, n, d)"),
            r"X must have 3 or 4 dims \(batch, n, d\), got shape \(2, 3\)",
        ),
        (
            lambda: check_keys_values(torch.zeros(2, 3, 4), torch.zeros(2, 4, 4)),
            r"keys and values must have the same length.*\(2, 3, 4\).*\(2, 4, 4\)",
        ),
        (
            lambda: check_leading_axes(
                torch.zeros(2, 1, 4), torch.zeros(3, 2, 4), torch.zeros(3, 2, 4)
            ),
            r"leading .*\(2, 1, 4\), \(3, 2, 4\) and \(3, 2, 4\)",
        ),
        (
            lambda: check_valid_lens(torch.tensor([1.0, 2.0]), 2, 3),
            r"valid_lens must be an integer tensor, got dtype torch.float32",
        ),
        (
            lambda: check_valid_lens(torch.tensor([1, 2, 3]), 2, 3),
            r"valid_lens must have shape \(batch,\) = \(2,\).*got \(3,\)",
        ),
        (
            lambda: check_valid_lens(torch.tensor([1, -1]), 2, 3),
            r"valid_lens must be non-negative, got minimum -1",
        ),
        (
            lambda: check_bool_mask(torch.ones(3, 3)),
            r"attn_mask must be a bool tensor .*torch.float32",
        ),
        (
            lambda: check_tokens("src", torch.zeros(2, 3)),
            r"src must be an integer tensor.*shape \(2, 3\) and dtype torch.float32",
        ),
        (
            lambda: check_tokens("src", torch.zeros(4, dtype=torch.long)),
            r"src must have shape \(batch, num_steps\), got shape \(4,\)",
        ),
        (
            lambda: check_sequence_lengths("lens", torch.tensor([0, 2]), torch.zeros(2, 3)),
            r"lens must lie in \[1, num_steps=3\], got \[0, 2\]",
        ),
        (
            lambda: check_sequence_lengths("lens", torch.tensor([1]), torch.zeros(2, 3)),
            r"lens must have shape \(batch,\) = \(2,\), got shape \(1,\)",
        ),
        (
            lambda: check_hidden_states("X", torch.zeros(2, 3, 5), 4),
            r"X must have shape \(batch, num_steps, num_hiddens=4\), got \(2, 3, 5\)",
        ),
    ],
)
def test_bad_input_names_the_argument_and_its_shape(check, message):
    with pytest.raises(ValueError, match=message):
        check()


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((2, 3, 4), (2, 5, 6), (2, 5, 7)), None),
        (((3, 4), (2, 5, 6), (2, 5, 7)), r"queries must have 3 dims \(batch, n, query_size\)"),
        (((2, 3, 5), (2, 5, 6), (2, 5, 7)), r"queries must have last dim query_size=4"),
        (((2, 3, 4), (2, 5, 6), (2, 5, 8)), r"values must have last dim value_size=7"),
        (((2, 3, 4), (2, 5, 6), (2, 4, 7)), r"keys and values must have the same length"),
    ],
)
def test_attention_inputs_must_fit_the_projections(shapes, message):
    tensors = [torch.zeros(shape) for shape in shapes]
    if message is None:
        check_attention_inputs(*tensors, (4, 6, 7))
    else:
        with pytest.raises(ValueError, match=message):
            check_attention_inputs(*tensors, (4, 6, 7))
