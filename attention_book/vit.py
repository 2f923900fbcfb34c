"""The Vision Transformer (ViT) of Dosovitskiy et al. (2021): an image as a sequence of patches.

ViT cuts an image into square patches, maps each patch linearly to a vector (a strided
convolution does exactly that), puts a learnable "class" token in front, adds a learnable
position embedding, and runs a pre-norm Transformer encoder. The class token's final vector,
after a LayerNorm, goes through a linear head to give the class logits.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from attention_book.multihead import MultiHeadAttention
from attention_book.positional import LearnedPositionalEmbedding

__all__ = [
    "PatchEmbedding",
    "ViT",
    "ViTBlock",
    "ViTMLP",
    "interpolate_position_embedding",
    "mean_attention_distance",
    "patch_distances",
]


# --8<-- [start:checks]
def _pair(name: str, size: int | tuple[int, int]) -> tuple[int, int]:
    """Return ``size`` as (height, width), accepting an int for a square."""
    pair = (size, size) if isinstance(size, int) else tuple(size)
    if len(pair) != 2 or not all(isinstance(s, int) and s > 0 for s in pair):
        raise ValueError(f"{name} must be a positive int or (height, width), got {size!r}")
    return pair  # type: ignore[return-value]


def _check_sizes(
    img_size: int | tuple[int, int], patch_size: int | tuple[int, int]
) -> tuple[tuple[int, int], tuple[int, int]]:
    """Return both sizes as (height, width), checking that the patches tile the image."""
    img_size, patch_size = _pair("img_size", img_size), _pair("patch_size", patch_size)
    if any(i % p for i, p in zip(img_size, patch_size, strict=True)):
        raise ValueError(
            f"img_size {img_size} must be divisible by patch_size {patch_size} "
            "in both height and width"
        )
    return img_size, patch_size


def _check_images(X: Tensor, in_channels: int, img_size: tuple[int, int]) -> None:
    """Raise a ValueError unless ``X`` is (batch, in_channels, height, width) of this size."""
    expected = (in_channels, *img_size)
    if X.dim() != 4 or tuple(X.shape[1:]) != expected:
        raise ValueError(
            f"X must have shape (batch, in_channels, height, width) = "
            f"(batch, {', '.join(map(str, expected))}), got {tuple(X.shape)}"
        )


# --8<-- [end:checks]


# --8<-- [start:PatchEmbedding]
class PatchEmbedding(nn.Module):
    """Cut an image into patches and map each patch to a ``num_hiddens`` vector.

    A convolution whose kernel size and stride both equal the patch size sees each patch
    exactly once, and applies the same linear map to every flattened patch: it is the patch
    embedding of ViT in one call.

    Args:
        img_size: Image size, an int for a square image or (height, width).
        patch_size: Patch size, an int for square patches or (height, width).
        num_hiddens: Size of each patch's embedding.
        in_channels: Number of image channels.

    Attributes:
        num_patches: Number of patches per image, ``(height // ph) * (width // pw)``.

    Shapes:
        - X: ``(batch, in_channels, height, width)``
        - returns: ``(batch, num_patches, num_hiddens)``, patches in row-major order

    Raises:
        ValueError: If the image size is not divisible by the patch size.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 96,
        patch_size: int | tuple[int, int] = 16,
        num_hiddens: int = 512,
        *,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        self.img_size, self.patch_size = _check_sizes(img_size, patch_size)  # (h, w), (ph, pw)
        self.in_channels = in_channels
        (height, width), (ph, pw) = self.img_size, self.patch_size
        self.num_patches = (height // ph) * (width // pw)  # N = (h / p) * (w / p)
        # Kernel = stride = patch size: each patch seen once, by the same linear map.
        self.conv = nn.Conv2d(in_channels, num_hiddens, kernel_size=(ph, pw), stride=(ph, pw))

    def forward(self, X: Tensor) -> Tensor:
        """Embed every patch of a batch of images.

        Args:
            X: Images.

        Returns:
            One embedding per patch.

        Raises:
            ValueError: If ``X`` is not (batch, in_channels, height, width) with the
                configured channels and size.
        """
        _check_images(X, self.in_channels, self.img_size)  # (batch, in_channels, height, width)
        X = self.conv(X)  # (batch, num_hiddens, height // ph, width // pw)
        return X.flatten(2).transpose(1, 2)  # (batch, num_patches, num_hiddens)


# --8<-- [end:PatchEmbedding]


# --8<-- [start:ViTMLP]
class ViTMLP(nn.Module):
    """The MLP of a ViT block: Linear, GELU, dropout, Linear, dropout.

    Args:
        mlp_num_hiddens: Width of the hidden layer.
        mlp_num_outputs: Size of each output vector.
        dropout: Dropout after the GELU and after the second Linear.
        mlp_num_inputs: Size of each input vector; defaults to ``mlp_num_outputs``, as in a
            Transformer block where the MLP maps the model width back to itself.

    Shapes:
        - X: ``(..., mlp_num_inputs)``
        - returns: ``(..., mlp_num_outputs)``
    """

    def __init__(
        self,
        mlp_num_hiddens: int,
        mlp_num_outputs: int,
        dropout: float = 0.5,
        *,
        mlp_num_inputs: int | None = None,
    ) -> None:
        super().__init__()
        if mlp_num_inputs is None:
            mlp_num_inputs = mlp_num_outputs
        self.dense1 = nn.Linear(mlp_num_inputs, mlp_num_hiddens)
        self.gelu = nn.GELU()
        self.dropout1 = nn.Dropout(dropout)
        self.dense2 = nn.Linear(mlp_num_hiddens, mlp_num_outputs)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, X: Tensor) -> Tensor:
        """Transform every position independently.

        Args:
            X: Input vectors.

        Returns:
            The transformed vectors.
        """
        return self.dropout2(self.dense2(self.dropout1(self.gelu(self.dense1(X)))))


# --8<-- [end:ViTMLP]


# --8<-- [start:ViTBlock]
class ViTBlock(nn.Module):
    """A pre-norm Transformer encoder block, as in ViT.

    ``X = X + Attention(LayerNorm(X))``, then ``X = X + MLP(LayerNorm(X))``. With the same
    weights and ``use_bias=True`` it computes what
    ``nn.TransformerEncoderLayer(norm_first=True, activation="gelu", batch_first=True)``
    computes.

    Args:
        num_hiddens: Model width.
        norm_shape: Shape normalized by the LayerNorms, usually ``num_hiddens``.
        mlp_num_hiddens: Hidden width of the MLP.
        num_heads: Number of attention heads.
        dropout: Dropout on attention weights and inside the MLP.
        use_bias: Whether the attention projections have biases.

    Masks follow the book's convention (``True`` = may attend) and are shared by all heads
    unless they have a heads axis: a 3-D ``attn_mask`` of shape ``(batch, num_steps,
    num_steps)`` is broadcast over the heads inside `MultiHeadAttention`, so no
    ``(batch * num_heads, ...)`` copy is needed, as ``nn.MultiheadAttention`` needs one.

    Shapes:
        - X: ``(batch, num_steps, num_hiddens)``
        - valid_lens: ``(batch,)`` or ``(batch, num_steps)``
        - attn_mask: bool, ``(num_steps, num_steps)``, ``(batch, num_steps, num_steps)``,
          ``(batch, 1, num_steps)`` (one flag per key) or
          ``(batch, num_heads, num_steps, num_steps)``
        - returns: ``(batch, num_steps, num_hiddens)``
    """

    def __init__(
        self,
        num_hiddens: int,
        norm_shape: int | tuple[int, ...],
        mlp_num_hiddens: int,
        num_heads: int,
        dropout: float,
        use_bias: bool = False,
    ) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(norm_shape)
        self.self_attention = MultiHeadAttention(num_hiddens, num_heads, dropout, use_bias)
        self.ln2 = nn.LayerNorm(norm_shape)
        self.mlp = ViTMLP(mlp_num_hiddens, num_hiddens, dropout, mlp_num_inputs=num_hiddens)

    def forward(
        self, X: Tensor, valid_lens: Tensor | None = None, *, attn_mask: Tensor | None = None
    ) -> Tensor:
        """Run the block.

        Args:
            X: Input vectors, one per position (the class token and the patches).
            valid_lens: Optional number of positions each sequence may attend to.
            attn_mask: Optional boolean mask, ``True`` where a position may attend to another.

        Returns:
            Output vectors, one per position.

        Raises:
            ValueError: If ``X`` is not 3-D or a mask is malformed (not boolean, or not
                broadcastable to ``(batch, num_heads, num_steps, num_steps)``).
        """
        H = self.ln1(X)  # (batch, num_steps, num_hiddens): LN inside the branch (pre-norm)
        X = X + self.self_attention(H, H, H, valid_lens, attn_mask)  # z' = MSA(LN(z)) + z
        return X + self.mlp(self.ln2(X))  # z = MLP(LN(z')) + z': (batch, num_steps, num_hiddens)


# --8<-- [end:ViTBlock]


# --8<-- [start:ViT]
class ViT(nn.Module):
    """The Vision Transformer: patch embedding, class token, pre-norm blocks, linear head.

    After each call, ``attention_weights[i]`` holds block ``i``'s self-attention weights;
    position 0 is the class token, positions 1.. are the patches in row-major order.

    Args:
        img_size: Image size, an int for a square image or (height, width).
        patch_size: Patch size, an int or (height, width); must divide ``img_size``.
        num_hiddens: Model width.
        mlp_num_hiddens: Hidden width of each block's MLP.
        num_heads: Number of attention heads.
        num_blks: Number of blocks.
        emb_dropout: Dropout on the embeddings (patches, class token and positions).
        blk_dropout: Dropout inside the blocks.
        lr: Learning rate, kept in ``self.lr`` for whoever builds the optimizer. d2l's ViT
            takes it here because it trains itself (a d2l ``Classifier``); this module does
            not use it, but keeps d2l's positional signature, so that
            ``ViT(img_size, patch_size, ..., blk_dropout, lr)`` still means what it says.
        use_bias: Whether the attention projections have biases.
        num_classes: Number of output classes.
        in_channels: Number of image channels.

    Shapes:
        - X: ``(batch, in_channels, height, width)``
        - returns: ``(batch, num_classes)`` logits
        - attention_weights[i]: ``(batch, num_heads, num_patches + 1, num_patches + 1)``

    Raises:
        ValueError: If the image size is not divisible by the patch size.
    """

    def __init__(
        self,
        img_size: int | tuple[int, int],
        patch_size: int | tuple[int, int],
        num_hiddens: int,
        mlp_num_hiddens: int,
        num_heads: int,
        num_blks: int,
        emb_dropout: float,
        blk_dropout: float,
        lr: float = 0.1,
        use_bias: bool = False,
        num_classes: int = 10,
        *,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        self.lr = lr
        self.patch_embedding = PatchEmbedding(
            img_size, patch_size, num_hiddens, in_channels=in_channels
        )
        self.cls_token = nn.Parameter(torch.zeros(1, 1, num_hiddens))
        num_steps = self.patch_embedding.num_patches + 1  # the patches and the class token
        # One learned vector per position (and dropout after adding it), table shape
        # (1, num_steps, num_hiddens) in pos_embedding.P.
        self.pos_embedding = LearnedPositionalEmbedding(num_hiddens, emb_dropout, num_steps)
        self.blks = nn.ModuleList(
            ViTBlock(num_hiddens, num_hiddens, mlp_num_hiddens, num_heads, blk_dropout, use_bias)
            for _ in range(num_blks)
        )
        self.head = nn.Sequential(nn.LayerNorm(num_hiddens), nn.Linear(num_hiddens, num_classes))
        self.attention_weights: list[Tensor | None] = [None] * num_blks

    # --8<-- [end:ViT]
    # --8<-- [start:ViT-forward]
    def forward(self, X: Tensor) -> Tensor:
        """Classify a batch of images.

        Args:
            X: Images.

        Returns:
            Class logits.

        Raises:
            ValueError: If ``X`` is not (batch, in_channels, height, width) with the
                configured channels and size.
        """
        X = self.patch_embedding(X)  # (batch, num_patches, num_hiddens)
        cls_tokens = self.cls_token.expand(X.shape[0], -1, -1)  # (batch, 1, num_hiddens)
        X = torch.cat((cls_tokens, X), dim=1)  # (batch, num_patches + 1, num_hiddens)
        X = self.pos_embedding(X)  # dropout(X + P): add each position's learned vector
        for i, blk in enumerate(self.blks):
            X = blk(X)  # (batch, num_patches + 1, num_hiddens)
            self.attention_weights[i] = blk.self_attention.attention_weights
        return self.head(X[:, 0])  # (batch, num_classes): read out the class token

    # --8<-- [end:ViT-forward]


# --8<-- [start:interpolate_position_embedding]
def interpolate_position_embedding(
    pos_embedding: Tensor,
    old_grid: int | tuple[int, int],
    new_grid: int | tuple[int, int],
    *,
    num_prefix_tokens: int = 1,
    mode: str = "bicubic",
) -> Tensor:
    """Resize a learned position table to a new grid of patches, keeping the class token's row.

    Fine-tuning at a higher resolution with the same patch size gives more patches than the
    table has rows. Dosovitskiy et al. (2021, Section 3.2) interpolate the pre-trained
    position embeddings in 2-D, according to their location in the image: the rows of the
    patches are laid out on their grid, resized as an image with one channel per
    embedding dimension, and read back in row-major order. The prefix rows (the class
    token's) belong to no location and are kept as they are.

    Args:
        pos_embedding: The table, prefix rows first (``ViT.pos_embedding.P``).
        old_grid: Patches per column and per row of the table, an int or (rows, cols).
        new_grid: Patches per column and per row wanted, an int or (rows, cols).
        num_prefix_tokens: Rows before the patches' (1: the class token).
        mode: ``"bicubic"`` or ``"bilinear"`` (`torch.nn.functional.interpolate`).

    Returns:
        The resized table.

    Shapes:
        - pos_embedding: ``(1, num_prefix_tokens + old_rows * old_cols, num_hiddens)``
        - returns: ``(1, num_prefix_tokens + new_rows * new_cols, num_hiddens)``

    Raises:
        ValueError: If a grid is not a positive int or pair, ``mode`` or
            ``num_prefix_tokens`` is not one of the accepted values, or the table is not
            floating point with one row per prefix token and per patch of ``old_grid``.
    """
    old_rows, old_cols = _pair("old_grid", old_grid)
    new_rows, new_cols = _pair("new_grid", new_grid)
    if mode not in ("bicubic", "bilinear"):
        raise ValueError(f"mode must be 'bicubic' or 'bilinear', got {mode!r}")
    if not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
        raise ValueError(f"num_prefix_tokens must be an int >= 0, got {num_prefix_tokens!r}")
    num_steps = num_prefix_tokens + old_rows * old_cols
    if pos_embedding.dim() != 3 or tuple(pos_embedding.shape[:2]) != (1, num_steps):
        raise ValueError(
            "pos_embedding must have shape (1, num_prefix_tokens + rows * cols, num_hiddens) = "
            f"(1, {num_prefix_tokens} + {old_rows} * {old_cols}, num_hiddens) for "
            f"old_grid {(old_rows, old_cols)}, got {tuple(pos_embedding.shape)}"
        )
    if not pos_embedding.is_floating_point():
        raise ValueError(f"pos_embedding must be floating point, got {pos_embedding.dtype}")
    prefix = pos_embedding[:, :num_prefix_tokens]  # (1, num_prefix_tokens, num_hiddens)
    grid = pos_embedding[:, num_prefix_tokens:].reshape(1, old_rows, old_cols, -1)
    grid = grid.permute(0, 3, 1, 2)  # (1, num_hiddens, old_rows, old_cols): an image
    grid = F.interpolate(grid, size=(new_rows, new_cols), mode=mode, align_corners=False)
    grid = grid.permute(0, 2, 3, 1).reshape(1, new_rows * new_cols, -1)  # row-major again
    return torch.cat([prefix, grid], dim=1)  # (1, num_prefix_tokens + new_rows * new_cols, D)


# --8<-- [end:interpolate_position_embedding]


# --8<-- [start:mean_attention_distance]
def patch_distances(
    grid_size: int | tuple[int, int], patch_size: int | tuple[int, int] = 1
) -> Tensor:
    """Distances in pixels between the centres of every pair of patches.

    Args:
        grid_size: Patches per column and per row, an int for a square grid or (rows, cols).
        patch_size: Patch size in pixels, an int or (height, width).

    Returns:
        The Euclidean distance between patch ``i`` and patch ``j``, patches in row-major
        order (the order of `PatchEmbedding`).

    Shapes:
        - returns: ``(rows * cols, rows * cols)``
    """
    rows, cols = _pair("grid_size", grid_size)
    ph, pw = _pair("patch_size", patch_size)
    row = torch.arange(rows).repeat_interleave(cols) * ph  # (num_patches,) pixels down
    col = torch.arange(cols).repeat(rows) * pw  # (num_patches,) pixels across
    offsets = torch.stack([row, col], dim=1).double()  # (num_patches, 2)
    return torch.cdist(offsets, offsets)  # (num_patches, num_patches)


def mean_attention_distance(
    attention_weights: Tensor,
    grid_size: int | tuple[int, int],
    patch_size: int | tuple[int, int] = 1,
    *,
    num_prefix_tokens: int = 1,
) -> Tensor:
    """Mean attention distance of each head (Dosovitskiy et al., 2021, Figure 7).

    For each query patch, the distance to every key patch weighted by the attention it
    pays to that key: how far, in pixels, the head gathers information. The class token
    (and any other prefix token) is left out as query and as key, and each query's weights
    over the patches are renormalized to sum to one. The result is averaged over the
    queries and the batch.

    Args:
        attention_weights: One layer's attention weights, the prefix tokens first.
        grid_size: Patches per column and per row, an int or (rows, cols).
        patch_size: Patch size in pixels, an int or (height, width).
        num_prefix_tokens: Tokens before the patches (1: the class token).

    Returns:
        The mean attention distance of each head, in pixels.

    Shapes:
        - attention_weights: ``(batch, num_heads, num_steps, num_steps)`` with
          ``num_steps = num_prefix_tokens + rows * cols``
        - returns: ``(num_heads,)``, float64

    Raises:
        ValueError: If the weights are not 4-D or do not have one row and one column per
            token.
    """
    distances = patch_distances(grid_size, patch_size)  # (num_patches, num_patches)
    num_steps = num_prefix_tokens + distances.shape[0]
    if attention_weights.dim() != 4 or attention_weights.shape[-2:] != (num_steps, num_steps):
        raise ValueError(
            "attention_weights must have shape (batch, num_heads, num_steps, num_steps) with "
            f"num_steps = {num_prefix_tokens} + {distances.shape[0]} patches = {num_steps}, "
            f"got {tuple(attention_weights.shape)}"
        )
    weights = attention_weights[..., num_prefix_tokens:, num_prefix_tokens:].double()
    weights = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-12)  # rows sum to 1
    per_query = (weights * distances.to(weights.device)).sum(dim=-1)  # (batch, heads, patches)
    return per_query.mean(dim=(0, 2))  # (num_heads,)


# --8<-- [end:mean_attention_distance]
