"""Input checks shared by the book's modules.

Every public module checks its inputs before computing, so that a wrong shape fails at once with
a `ValueError` that names the argument, the shape it got and the shape it needs, instead of a
broadcasting accident or a NaN three layers later. The checks that more than one module needs
live here; a check that only one module uses stays in that module.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = [
    "check_attention_inputs",
    "check_bool_mask",
    "check_dims",
    "check_feature_size",
    "check_hidden_states",
    "check_keys_values",
    "check_leading_axes",
    "check_sequence_lengths",
    "check_tokens",
    "check_valid_lens",
]


def check_dims(name: str, X: Tensor, allowed: tuple[int, ...], layout: str) -> None:
    """Raise ``ValueError`` unless ``X`` has one of the ``allowed`` numbers of dimensions.

    Args:
        name: The argument's name, for the message.
        X: The tensor to check.
        allowed: The accepted numbers of dimensions.
        layout: The expected layout, for the message, e.g. ``"(batch, n, d)"``.
    """
    if X.dim() not in allowed:
        raise ValueError(
            f"{name} must have {' or '.join(map(str, allowed))} dims {layout}, "
            f"got shape {tuple(X.shape)}"
        )


def check_feature_size(name: str, X: Tensor, size_name: str = "d") -> None:
    """Raise ``ValueError`` unless the last axis of ``X``, the size of queries and keys, is >= 1.

    Scaled dot-product attention divides the scores by ``sqrt(d)``: with ``d = 0`` every score
    would be ``0 / 0``. PyTorch's ``scaled_dot_product_attention`` then gives every key the
    same weight; the book refuses the input instead, on every path and backend.

    Args:
        name: The argument's name, for the message.
        X: Queries (or keys), ``(..., d)``.
        size_name: The name of the last axis, for the message (``"d"``, ``"head_dim"``).
    """
    if X.shape[-1] < 1:
        raise ValueError(
            f"{name} must have {size_name} >= 1 (its last dim; the scores are divided by "
            f"sqrt({size_name})), got shape {tuple(X.shape)}"
        )


def check_keys_values(keys: Tensor, values: Tensor) -> None:
    """Raise ``ValueError`` unless keys and values hold the same number of entries.

    Args:
        keys: Keys, ``(..., num_keys, key_size)``.
        values: Values, ``(..., num_keys, value_dim)``.
    """
    if keys.shape[-2] != values.shape[-2]:
        raise ValueError(
            f"keys and values must have the same length (num_keys), got keys of shape "
            f"{tuple(keys.shape)} and values of shape {tuple(values.shape)}"
        )


def check_attention_inputs(
    queries: Tensor, keys: Tensor, values: Tensor, sizes: tuple[int, int, int]
) -> None:
    """Raise ``ValueError`` unless the inputs of a multi-head layer fit its projections.

    Each input must be 3-D, ``(batch, n, size)``, with the feature size its projection takes,
    and keys and values must be as many.

    Args:
        queries: Query vectors, ``(batch, num_queries, query_size)``.
        keys: Key vectors, ``(batch, num_keys, key_size)``.
        values: Value vectors, ``(batch, num_keys, value_size)``.
        sizes: The layer's ``(query_size, key_size, value_size)``.
    """
    for name, X, size_name, size in zip(
        ("queries", "keys", "values"),
        (queries, keys, values),
        ("query_size", "key_size", "value_size"),
        sizes,
        strict=True,
    ):
        check_dims(name, X, (3,), f"(batch, n, {size_name})")
        if X.shape[-1] != size:
            raise ValueError(
                f"{name} must have last dim {size_name}={size}, got shape {tuple(X.shape)}"
            )
    check_keys_values(keys, values)


def check_leading_axes(queries: Tensor, keys: Tensor, values: Tensor) -> None:
    """Raise ``ValueError`` unless the batch (and heads) axes of the three inputs agree.

    Args:
        queries: Queries, ``(batch, [num_heads,] num_queries, d)``.
        keys: Keys, ``(batch, [num_heads,] num_keys, d)``.
        values: Values, ``(batch, [num_heads,] num_keys, value_dim)``.
    """
    if not queries.shape[:-2] == keys.shape[:-2] == values.shape[:-2]:
        raise ValueError(
            "queries, keys and values must agree on their leading (batch[, num_heads]) axes, "
            f"got shapes {tuple(queries.shape)}, {tuple(keys.shape)} and {tuple(values.shape)}"
        )


def check_valid_lens(valid_lens: Tensor, batch_size: int, num_queries: int) -> Tensor:
    """Check the valid key counts of a batch of attention rows and return them as a tensor.

    Args:
        valid_lens: Integer valid key counts, one per sequence or one per query (a tensor, or
            anything `torch.as_tensor` accepts).
        batch_size: The batch size they must match.
        num_queries: The number of queries, for the per-query form.

    Returns:
        ``valid_lens`` as an integer tensor.

    Shapes:
        - valid_lens: ``(batch,)`` or ``(batch, num_queries)``

    Raises:
        ValueError: If ``valid_lens`` is not an integer tensor, has another shape or holds a
            negative length.
    """
    if not isinstance(valid_lens, Tensor):
        valid_lens = torch.as_tensor(valid_lens)
    if valid_lens.is_floating_point() or valid_lens.is_complex() or valid_lens.dtype == torch.bool:
        raise ValueError(
            f"valid_lens must be an integer tensor, got dtype {valid_lens.dtype} "
            f"with shape {tuple(valid_lens.shape)}"
        )
    expected = {1: (batch_size,), 2: (batch_size, num_queries)}.get(valid_lens.dim())
    if expected is None or tuple(valid_lens.shape) != expected:
        raise ValueError(
            f"valid_lens must have shape (batch,) = ({batch_size},) or "
            f"(batch, num_queries) = ({batch_size}, {num_queries}), "
            f"got {tuple(valid_lens.shape)}"
        )
    if valid_lens.numel() > 0 and bool((valid_lens < 0).any()):
        raise ValueError(
            f"valid_lens must be non-negative, got minimum {int(valid_lens.min())} "
            f"in a tensor of shape {tuple(valid_lens.shape)}"
        )
    return valid_lens


def check_bool_mask(attn_mask: Tensor) -> None:
    """Raise ``ValueError`` unless ``attn_mask`` is a boolean tensor (``True`` = may attend).

    Args:
        attn_mask: The mask to check.
    """
    if not isinstance(attn_mask, Tensor) or attn_mask.dtype != torch.bool:
        dtype = attn_mask.dtype if isinstance(attn_mask, Tensor) else type(attn_mask)
        raise ValueError(f"attn_mask must be a bool tensor (True = may attend), got {dtype}")


def check_tokens(name: str, X: Tensor) -> None:
    """Raise ``ValueError`` unless ``X`` is a 2-D integer tensor of token indices.

    Args:
        name: The argument's name, for the message.
        X: Token indices, ``(batch, num_steps)``.
    """
    if X.dim() != 2 or X.is_floating_point() or X.is_complex() or X.dtype == torch.bool:
        raise ValueError(
            f"{name} must be an integer tensor of token indices: {name} must have shape "
            f"(batch, num_steps), got shape {tuple(X.shape)} and dtype {X.dtype}"
        )


def check_sequence_lengths(name: str, lengths: Tensor | None, tokens: Tensor) -> None:
    """Raise ``ValueError`` unless ``lengths`` gives each sequence of ``tokens`` 1 or more tokens.

    Unlike `check_valid_lens`, which allows 0 (a query with no key to attend gets zeros), an
    encoder or a loss needs at least one real token per sequence.

    Args:
        name: The argument's name, for the message.
        lengths: Number of real (non-padding) tokens of each sequence, or ``None`` (no check).
        tokens: The token indices they describe, ``(batch, num_steps)``.

    Shapes:
        - lengths: ``(batch,)``
    """
    if lengths is None:
        return
    batch, num_steps = tokens.shape
    if lengths.shape != (batch,):
        raise ValueError(
            f"{name} must have shape (batch,) = ({batch},), got shape {tuple(lengths.shape)}"
        )
    if bool((lengths < 1).any()) or bool((lengths > num_steps).any()):
        raise ValueError(f"{name} must lie in [1, num_steps={num_steps}], got {lengths.tolist()}")


def check_hidden_states(name: str, X: Tensor, num_hiddens: int) -> None:
    """Raise ``ValueError`` unless ``X`` has shape ``(batch, num_steps, num_hiddens)``.

    Args:
        name: The argument's name, for the message.
        X: Hidden states.
        num_hiddens: The feature size they must have.
    """
    if X.dim() != 3 or X.shape[-1] != num_hiddens:
        raise ValueError(
            f"{name} must have shape (batch, num_steps, num_hiddens={num_hiddens}), "
            f"got {tuple(X.shape)}"
        )
