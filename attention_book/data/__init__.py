"""Offline data for the book: a generated English→French corpus, its loaders, and images.

Nothing here downloads anything unless a reader asks for it. One file per step, in reading
order:

- `corpus`: the built-in English→French corpus, generated from CLDR (Babel) and num2words,
  split into train, validation and test, and cached (`builtin_pairs`, `CORPUS_VERSION`).
- `text`: normalization, tokens, the `Vocab` and padded index arrays (`build_arrays`).
- `translation`: the translation loaders a chapter calls (`load_translation_data`).
- `files`: the one verified `download`, the sentence-pair file reader and the IDX reader.
- `images`: scikit-learn's digits and Fashion-MNIST as image classification loaders.

Every public name of those files is re-exported here, so ``from attention_book.data import
tokenize`` works. Babel, num2words and scikit-learn are imported only by the functions that
use them, so importing this package stays quick. ``python -m attention_book.data`` prints
the corpus's statistics (`corpus_summary`).
"""

from attention_book.data.corpus import (
    CORPUS_VERSION,
    builtin_pairs,
    corpus_summary,
    main,
    split_pairs,
)
from attention_book.data.files import (
    SentencePairs,
    download,
    download_sentence_pairs,
    file_digest,
    read_idx,
    read_sentence_pairs,
)
from attention_book.data.images import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_FILES,
    FASHION_MNIST_URL,
    ImageData,
    load_digits_data,
    load_fashion_mnist,
)
from attention_book.data.text import RESERVED_TOKENS, Vocab, build_arrays, preprocess, tokenize
from attention_book.data.translation import (
    LengthBucketSampler,
    TranslationData,
    load_translation_data,
)

__all__ = [
    "CORPUS_VERSION",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_FILES",
    "FASHION_MNIST_URL",
    "RESERVED_TOKENS",
    "ImageData",
    "LengthBucketSampler",
    "SentencePairs",
    "TranslationData",
    "Vocab",
    "build_arrays",
    "builtin_pairs",
    "corpus_summary",
    "download",
    "download_sentence_pairs",
    "file_digest",
    "load_digits_data",
    "load_fashion_mnist",
    "load_translation_data",
    "main",
    "preprocess",
    "read_idx",
    "read_sentence_pairs",
    "split_pairs",
    "tokenize",
]
