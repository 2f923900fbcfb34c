"""From sentences to tensors: normalization, tokens, a vocabulary, padded index arrays.

The pipeline every translation loader uses, in the order a sentence goes through it:
`preprocess` lowercases and separates punctuation, `tokenize` splits on spaces, `Vocab` turns
tokens into indices (reserved tokens first, then the most frequent), and `build_arrays` appends
`<eos>` and pads or truncates every sentence to the same number of steps.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Sequence

import torch

__all__ = ["RESERVED_TOKENS", "Vocab", "build_arrays", "preprocess", "tokenize"]

#: Reserved tokens, always the first indices of a `Vocab`: padding, begin and end of sequence,
#: unknown word.
RESERVED_TOKENS = ("<pad>", "<bos>", "<eos>", "<unk>")

# A punctuation mark that ends a word: preceded by a non-space, followed by a space or the end.
# "3:45", "1,000" and "3.5" stay whole; "world!" becomes "world !".
_PUNCTUATION_AT_WORD_END = re.compile(r"(?<=\S)([,.!?;:])(?=\s|$)")


def preprocess(text: str) -> str:
    """Normalize a sentence before tokenization.

    Lowercases, turns non-breaking spaces (U+00A0, and U+202F that CLDR puts in "3:45 PM" and
    French typography puts before "!" or "?") into ordinary spaces, puts a space before a
    punctuation mark that ends a word, and collapses runs of spaces. Applying it twice changes
    nothing.

    Args:
        text: A raw sentence.

    Returns:
        The normalized sentence.

    Example:
        >>> preprocess("Va\u202f! Il est 3:45\u202fPM, déjà.")
        'va ! il est 3:45 pm , déjà .'
    """
    text = text.replace("\u202f", " ").replace("\xa0", " ").lower()
    text = _PUNCTUATION_AT_WORD_END.sub(lambda match: " " + match[1], text)
    return " ".join(text.split())


def tokenize(sentence: str) -> list[str]:
    """Split a sentence into word and punctuation tokens (after `preprocess`).

    Args:
        sentence: A raw or already preprocessed sentence.

    Returns:
        The list of tokens.

    Example:
        >>> tokenize("Hello, world!")
        ['hello', ',', 'world', '!']
    """
    return preprocess(sentence).split()


class Vocab:
    """A vocabulary: maps tokens to indices and back.

    The reserved tokens `<pad>`, `<bos>`, `<eos>`, `<unk>` take indices 0 to 3, then come any
    extra reserved tokens, then the tokens seen at least `min_freq` times, most frequent first
    (ties in alphabetical order, so the same tokens always give the same indices). Tokens
    not in the vocabulary map to `<unk>`.

    Args:
        tokens: The tokens to count: a flat list, or a list of token lists (one per sentence).
        min_freq: Tokens seen fewer times than this are left out (they will map to `<unk>`).
        reserved_tokens: Extra tokens always included, after the four standard ones.

    Example:
        >>> vocab = Vocab([["a", "b", "a"]])
        >>> vocab["a"], vocab[["b", "zebra"]], vocab.to_tokens([4, 5, 2])
        (4, [5, 3], ['a', 'b', '<eos>'])
    """

    def __init__(
        self,
        tokens: Iterable[str] | Iterable[Sequence[str]] = (),
        min_freq: int = 0,
        reserved_tokens: Sequence[str] = (),
    ) -> None:
        tokens = list(tokens)
        if tokens and not isinstance(tokens[0], str):
            tokens = [token for line in tokens for token in line]
        counter = collections.Counter(tokens)
        self.token_freqs = sorted(counter.items(), key=lambda item: (-item[1], item[0]))
        self.idx_to_token = list(dict.fromkeys([*RESERVED_TOKENS, *reserved_tokens]))
        reserved = set(self.idx_to_token)
        self.idx_to_token += [
            token for token, freq in self.token_freqs if freq >= min_freq and token not in reserved
        ]
        self.token_to_idx = {token: index for index, token in enumerate(self.idx_to_token)}

    def __len__(self) -> int:
        return len(self.idx_to_token)

    def __getitem__(self, tokens: str | Sequence[str]) -> int | list[int]:
        """Index of a token, or list of indices of a list of tokens; unknown → `<unk>`."""
        unk = self.unk
        if isinstance(tokens, str):
            return self.token_to_idx.get(tokens, unk)
        return [self.token_to_idx.get(token, unk) for token in tokens]

    def to_tokens(self, indices: int | Sequence[int] | torch.Tensor) -> str | list[str]:
        """Token of an index, or list of tokens of a sequence (or 1-D tensor) of indices."""
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        if isinstance(indices, int):
            return self.idx_to_token[indices]
        return [self.idx_to_token[int(index)] for index in indices]

    @property
    def pad(self) -> int:
        """Index of `<pad>`."""
        return self.token_to_idx["<pad>"]

    @property
    def bos(self) -> int:
        """Index of `<bos>`."""
        return self.token_to_idx["<bos>"]

    @property
    def eos(self) -> int:
        """Index of `<eos>`."""
        return self.token_to_idx["<eos>"]

    @property
    def unk(self) -> int:
        """Index of `<unk>`."""
        return self.token_to_idx["<unk>"]


def build_arrays(
    token_lists: Sequence[Sequence[str]], vocab: Vocab, num_steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Turn token lists into a padded index tensor and their valid lengths.

    Each list gets `<eos>` appended, then is truncated to `num_steps` (a truncated sentence
    loses its `<eos>`) or padded with `<pad>`.

    Args:
        token_lists: One list of tokens per sentence.
        vocab: The vocabulary of that side (source or target).
        num_steps: Length of every row of the result.

    Returns:
        (indices, valid_lens): the index tensor and the number of non-padding positions of
        each row.

    Shapes:
        - indices: (num_sentences, num_steps), dtype long
        - valid_lens: (num_sentences,), dtype long

    Raises:
        ValueError: If `num_steps` is smaller than 1.
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    rows, valid_lens = [], []
    for tokens in token_lists:
        indices = (vocab[list(tokens)] + [vocab.eos])[:num_steps]
        valid_lens.append(len(indices))
        rows.append(indices + [vocab.pad] * (num_steps - len(indices)))
    array = torch.tensor(rows, dtype=torch.long).reshape(len(rows), num_steps)
    return array, torch.tensor(valid_lens, dtype=torch.long)
