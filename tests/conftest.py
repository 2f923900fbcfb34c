"""Shared test configuration.

Property-based tests explore new random examples on every local run, but in CI (``CI=true``,
as `.ci/run` sets it) they replay a fixed sequence, so a landing never depends on luck.

Triton reads ``TRITON_INTERPRET`` once, when it is first imported, and PyTorch imports Triton on
some paths of its own. Without a CUDA GPU the Triton kernels can only run under Triton's CPU
interpreter, so the variable is set here, before any test module can import Triton; on a
machine with a GPU it is left alone and the tests run the compiled kernels. (Importing torch
does not import Triton.)
"""

import os

import pytest
import torch
from hypothesis import settings

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "default")


@pytest.fixture(scope="session")
def live_models(tmp_path_factory):
    """Two tiny untrained models, exported as the build exports the book's (`booktools.live`).

    A translator and a character GPT of the book's classes, seeded, with their reference cases
    computed by PyTorch: what the tests of the live widgets run in a browser, without the
    trained models of the result store.

    Returns:
        ``{"translator": folder, "gpt": folder}``, each with ``model.json``, ``weights.bin``
        and ``reference.json``.
    """
    from attention_book.data.text import Vocab, tokenize
    from attention_book.gpt import GPT
    from attention_book.seq2seq import EncoderDecoder
    from attention_book.transformer import TransformerEncoder
    from attention_book.transformer_decoder import TransformerDecoder
    from booktools.live.gpt import export_gpt_model
    from booktools.live.translator import export_translator_model

    root = tmp_path_factory.mktemp("live-models")
    torch.manual_seed(0)
    sources = ["We sold 3 books.", "On Friday, she paid 12 euros."]
    src_vocab = Vocab([tokenize(s) for s in sources])
    tgt_vocab = Vocab([tokenize("Nous avons vendu 3 livres. Vendredi, elle a payé 12 euros.")])
    encoder = TransformerEncoder(len(src_vocab), 16, 32, 2, 2, 0.0)
    decoder = TransformerDecoder(len(tgt_vocab), 16, 32, 2, 2, 0.0)
    translator = EncoderDecoder(encoder, decoder).eval()
    cases = [sources[0], "On Friday, zebras ate 12 cakes!"]  # unknown words, punctuation
    (root / "translator").mkdir()
    export_translator_model(translator, src_vocab, tgt_vocab, 10, 12, cases, root / "translator")
    chars = sorted(set("abcdef .,\n"))
    gpt = GPT(len(chars), 16, 2, 2, max_len=64).eval()
    (root / "gpt").mkdir()
    export_gpt_model(gpt, chars, ["bad cafe", "fed"], 12, root / "gpt", trained_length=16)
    return {"translator": root / "translator", "gpt": root / "gpt"}
