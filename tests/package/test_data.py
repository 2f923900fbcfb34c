import gzip
import hashlib
import statistics
import zipfile

import numpy as np
import pytest
import torch

from attention_book.data import (
    FASHION_MNIST_FILES,
    RESERVED_TOKENS,
    LengthBucketSampler,
    Vocab,
    build_arrays,
    builtin_pairs,
    download,
    download_sentence_pairs,
    load_digits_data,
    load_fashion_mnist,
    load_translation_data,
    preprocess,
    read_idx,
    read_sentence_pairs,
    split_pairs,
    tokenize,
)
from attention_book.data import corpus as builtin_corpus
from attention_book.data.images import balanced_subset, random_shift

# --- the built-in corpus ---------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def tmp_cache(tmp_path_factory):
    # The corpus is cached on disk: keep the tests' copies out of the reader's cache.
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("cache")
        patch.setenv("ATTENTION_BOOK_CACHE", str(path))
        builtin_corpus.builtin_splits.cache_clear()
        yield path
    builtin_corpus.builtin_splits.cache_clear()


@pytest.fixture(scope="module")
def corpus():
    return {split: builtin_pairs(split) for split in ("train", "valid", "test")}


def test_builtin_splits_are_disjoint_and_sized(corpus):
    sources = {split: {preprocess(s) for s, _ in pairs} for split, pairs in corpus.items()}
    assert not sources["train"] & sources["valid"]
    assert not sources["train"] & sources["test"]
    assert not sources["valid"] & sources["test"]
    pairs = {split: set(p) for split, p in corpus.items()}
    assert not pairs["train"] & (pairs["valid"] | pairs["test"])
    for split, items in corpus.items():
        assert len(set(items)) == len(items), f"duplicate pairs in {split}"
    total = sum(len(p) for p in corpus.values())
    assert 10_000 <= len(corpus["train"]) <= 20_000
    assert len(corpus["valid"]) == pytest.approx(0.1 * total, abs=2)
    assert len(corpus["test"]) == pytest.approx(0.1 * total, abs=2)


def test_builtin_lengths_spread_from_a_few_tokens_to_forty_plus(corpus):
    for split, pairs in corpus.items():
        lengths = [len(tokenize(source)) for source, _ in pairs]
        assert min(lengths) <= 6, split
        assert max(lengths) >= 40, split
        assert 10 <= statistics.median(lengths) <= 25, split
        # a spread: every band of 10 tokens up to 40 holds at least 5% of the sentences
        for low in (0, 10, 20, 30):
            share = sum(low <= n < low + 10 for n in lengths) / len(lengths)
            assert share >= 0.05, (split, low, share)


def test_builtin_corpus_is_deterministic_seeded_and_cached_on_disk(corpus, tmp_cache):
    assert len(list(tmp_cache.glob("builtin-corpus-*.pt"))) == 1
    builtin_corpus.builtin_splits.cache_clear()
    assert builtin_pairs("test") == corpus["test"]  # from the disk cache
    assert builtin_corpus.generate_splits(15_000, 0)["test"] == corpus["test"]  # generated afresh
    assert builtin_pairs("test", num_pairs=200, seed=1) != builtin_pairs("test", num_pairs=200)


def test_builtin_pairs_come_from_cldr_and_num2words(corpus):
    import datetime

    from babel.dates import format_date
    from num2words import num2words

    text = " ".join(f"{s} || {t}" for s, t in corpus["train"][:3000])
    sunday = datetime.date(2026, 11, 29)
    assert format_date(sunday, format="full", locale="en").split(",")[0] == "Sunday"
    # Every weekday and month name that CLDR gives appears on the right side.
    for day in range(7):
        date = sunday + datetime.timedelta(days=day)
        assert format_date(date, "EEEE", locale="en") in text
        assert format_date(date, "EEEE", locale="fr") in text
    assert num2words(97, lang="fr") == "quatre-vingt-dix-sept"
    assert any("quatre-vingt" in t for _, t in corpus["train"])
    assert any(" ago" in s and t.lower().startswith("il y a") for s, t in corpus["train"])


def test_builtin_pairs_rejects_an_unknown_split():
    with pytest.raises(ValueError, match="split"):
        builtin_pairs("training")


def test_split_pairs_dedupes_before_splitting():
    pairs = [(f"Sentence {i % 50}.", f"Phrase {i % 50}.") for i in range(200)]
    splits = split_pairs(pairs, seed=0)
    assert sum(len(p) for p in splits.values()) == 50
    assert (len(splits["train"]), len(splits["valid"]), len(splits["test"])) == (40, 5, 5)
    assert split_pairs(pairs, seed=0) == splits
    assert split_pairs(pairs, seed=1) != splits
    with pytest.raises(ValueError, match="fractions"):
        split_pairs(pairs, fractions=(0.9, 0.2))


# --- preprocessing, vocabulary, arrays -------------------------------------------------------


def test_preprocess_and_tokenize():
    assert preprocess("Va\u202f!") == "va !"
    assert preprocess("Il est 3:45\xa0PM, déjà.") == "il est 3:45 pm , déjà ."
    assert preprocess("1,000 and 3.5 stay whole.") == "1,000 and 3.5 stay whole ."
    assert preprocess("Hello,  world !") == "hello , world !"
    text = "Qu'est-ce que c'est\u202f? Je ne sais pas."
    assert preprocess(preprocess(text)) == preprocess(text)
    assert tokenize("Hello, world!") == ["hello", ",", "world", "!"]


def test_vocab_reserved_tokens_order_and_unknown():
    vocab = Vocab([["b", "a", "a", "c"], ["a", "b", "rare"]], min_freq=2, reserved_tokens=["<x>"])
    assert vocab.idx_to_token[:5] == [*RESERVED_TOKENS, "<x>"]
    assert (vocab.pad, vocab.bos, vocab.eos, vocab.unk) == (0, 1, 2, 3)
    assert vocab.to_tokens([5, 6]) == ["a", "b"]  # most frequent first
    assert len(vocab) == 7  # "c" and "rare" are below min_freq
    assert vocab["rare"] == vocab.unk
    assert vocab["never seen"] == vocab.unk
    assert vocab[["a", "zebra", "<eos>"]] == [5, vocab.unk, vocab.eos]
    assert vocab.to_tokens(torch.tensor([1, 5])) == ["<bos>", "a"]
    assert vocab.to_tokens(6) == "b"
    assert Vocab(["z", "y", "y"]).idx_to_token[4:] == ["y", "z"]  # a flat list works too


def test_vocab_ties_are_alphabetical_so_indices_are_stable():
    assert Vocab([["q", "p"]]).idx_to_token[4:] == ["p", "q"]
    assert Vocab([["p", "q"]]).idx_to_token == Vocab([["q", "p"]]).idx_to_token


def test_build_arrays_appends_eos_then_pads_or_truncates():
    vocab = Vocab([["a", "b", "c"]])
    array, valid_lens = build_arrays([["a", "b"], ["a", "b", "c", "a", "b"], []], vocab, 4)
    a, b, c = vocab[["a", "b", "c"]]
    assert array.tolist() == [
        [a, b, vocab.eos, vocab.pad],
        [a, b, c, a],
        [vocab.eos, vocab.pad, vocab.pad, vocab.pad],
    ]
    assert valid_lens.tolist() == [3, 4, 1]
    assert array.dtype == valid_lens.dtype == torch.long
    with pytest.raises(ValueError, match="num_steps"):
        build_arrays([["a"]], vocab, 0)


# --- sentence-pair files ---------------------------------------------------------------------

FRA_LINES = [
    "Go.\tVa !\tCC-BY 2.0 (France) Attribution: tatoeba.org #2877272 (CM) & #1158250 (Wittydev)",
    "Hi.\tSalut !\tCC-BY 2.0 (France) Attribution: tatoeba.org #538123 (CM) & #509819 (Aiji)",
    "Run!\tCours\u202f!\tCC-BY 2.0 (France) Attribution: tatoeba.org #906328 (papabear)",
    "I'm OK.\tJe vais bien.",
    "Who won?\tQui a gagné\u202f?",
    "Wait!\tAttends !",
]


def _write(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_read_sentence_pairs_ignores_extra_columns(tmp_path):
    path = _write(tmp_path / "fra.txt", [*FRA_LINES, ""])
    pairs = read_sentence_pairs(path)
    assert pairs[0] == ("Go.", "Va !")
    assert pairs[2] == ("Run!", "Cours\u202f!")
    assert len(pairs) == 6 and pairs.num_skipped == 0


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [("No tab here.", "no tab"), ("\tVide.", "empty side"), ("Empty.\t  ", "empty side")],
)
def test_malformed_line_is_reported_with_its_number(tmp_path, bad_line, problem):
    path = _write(tmp_path / "fra.txt", [*FRA_LINES[:3], bad_line, *FRA_LINES[3:]])
    with pytest.raises(ValueError, match=f"line 4: .*{problem}"):
        read_sentence_pairs(path)
    pairs = read_sentence_pairs(path, skip_malformed=True)
    assert len(pairs) == len(FRA_LINES)
    assert pairs.num_skipped == 1 and pairs.skipped_lines == [4]


def test_empty_file_is_an_error(tmp_path):
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="no sentence pair"):
        read_sentence_pairs(tmp_path / "empty.txt")
    only_bad = _write(tmp_path / "bad.txt", ["no tab", "still none"])
    with pytest.raises(ValueError, match="no sentence pair"):
        read_sentence_pairs(only_bad, skip_malformed=True)


def test_translation_data_from_a_pairs_file(tmp_path):
    lines = [f"We saw {n} cats.\tNous avons vu {n} chats." for n in range(40)] + FRA_LINES
    path = _write(tmp_path / "fra.txt", lines)
    loaded = load_translation_data(batch_size=4, num_steps=6, path=path, min_freq=2)
    assert len(loaded.train_pairs) + len(loaded.valid_pairs) + len(loaded.test_pairs) == 46
    assert loaded.src_vocab["cats"] != loaded.src_vocab.unk
    assert loaded.src_vocab["run"] == loaded.src_vocab.unk  # seen once, min_freq=2
    src, src_valid_len, tgt_input, tgt_valid_len, tgt_label = next(iter(loaded.train_loader))
    assert src.shape == tgt_input.shape == tgt_label.shape == (4, 6)
    assert src_valid_len.shape == tgt_valid_len.shape == (4,)


def test_translation_batches_are_consistent():
    loaded = load_translation_data(batch_size=8, num_pairs=400, seed=2)
    tgt = loaded.tgt_vocab
    for src, src_valid_len, tgt_input, tgt_valid_len, tgt_label in loaded.train_loader:
        assert (tgt_input[:, 0] == tgt.bos).all()
        assert torch.equal(tgt_input[:, 1:], tgt_label[:, :-1])  # teacher forcing: shift right
        rows = torch.arange(len(src))
        assert (src[rows, src_valid_len - 1] == loaded.src_vocab.eos).all()
        assert (tgt_label[rows, tgt_valid_len - 1] == tgt.eos).all()
        steps = torch.arange(loaded.num_steps)
        padding = steps[None, :] >= tgt_valid_len[:, None]
        assert (tgt_label[padding] == tgt.pad).all()
    longest = max(
        len(tokenize(s)) for pairs in (loaded.train_pairs, loaded.test_pairs) for s, _ in pairs
    )
    assert loaded.num_steps >= longest + 1
    # The test loader follows test_pairs, so BLEU can use the raw references.
    src, src_valid_len = loaded.encode_sources([s for s, _ in loaded.test_pairs[:8]])
    assert torch.equal(src, next(iter(loaded.test_loader))[0])


def test_translation_loader_order_is_seeded():
    def first_batch(seed):
        return next(
            iter(load_translation_data(batch_size=8, num_pairs=300, seed=seed).train_loader)
        )

    assert torch.equal(first_batch(0)[0], first_batch(0)[0])
    assert not torch.equal(first_batch(0)[0], first_batch(1)[0])


def test_unknown_test_words_map_to_unk():
    loaded = load_translation_data(batch_size=8, num_pairs=300, max_train_pairs=20)
    src, _ = loaded.encode_sources(["We sold xylophones."])
    tokens = loaded.src_vocab.to_tokens(src[0, :4])
    assert tokens == ["we", "sold", "<unk>", "."]


# --- download helper (never online in tests) -------------------------------------------------


def test_download_verifies_the_checksum(tmp_path):
    source = _write(tmp_path / "remote.txt", FRA_LINES)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    target = tmp_path / "data" / "fra.txt"
    with pytest.raises(ValueError, match="checksum"):
        download_sentence_pairs(source.as_uri(), target, sha256="0" * 64)
    assert not target.exists() and list((tmp_path / "data").iterdir()) == []
    assert download_sentence_pairs(source.as_uri(), target, sha256=digest) == target
    assert read_sentence_pairs(target)[0] == ("Go.", "Va !")
    source.unlink()  # already there with the right checksum: nothing is fetched
    assert download_sentence_pairs(source.as_uri(), target, sha256=digest) == target


def test_download_extracts_a_member_of_a_zip(tmp_path):
    archive = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("fra.txt", "\n".join(FRA_LINES))
        zipped.writestr("_about.txt", "about")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    target = download_sentence_pairs(
        archive.as_uri(), tmp_path / "out" / "fra.txt", digest, "fra.txt"
    )
    assert len(read_sentence_pairs(target)) == len(FRA_LINES)


def test_download_with_a_bad_zip_checksum_leaves_nothing(tmp_path):
    archive = tmp_path / "fra-eng.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("fra.txt", "\n".join(FRA_LINES))
    target = tmp_path / "out" / "fra.txt"
    with pytest.raises(ValueError, match="checksum mismatch"):
        download_sentence_pairs(archive.as_uri(), target, "0" * 64, "fra.txt")
    assert list((tmp_path / "out").iterdir()) == []  # no archive, no member, no temporary


def test_download_moves_a_file_into_place_only_once_verified(tmp_path):
    source = tmp_path / "remote.bin"
    source.write_bytes(b"new contents")
    target = tmp_path / "data" / "file.bin"
    target.parent.mkdir()
    target.write_bytes(b"old contents")
    with pytest.raises(ValueError, match=r"checksum mismatch .* expected sha256"):
        download(source.as_uri(), target, "0" * 64)
    assert target.read_bytes() == b"old contents"  # untouched
    assert [path.name for path in target.parent.iterdir()] == ["file.bin"]
    md5 = hashlib.md5(b"new contents").hexdigest()
    assert download(source.as_uri(), target, md5.upper(), algorithm="md5") == target
    assert target.read_bytes() == b"new contents"
    assert download(source.as_uri(), tmp_path / "unchecked.bin", None).exists()
    with pytest.raises(ValueError, match="algorithm"):
        download(source.as_uri(), target, md5, algorithm="nope")


def test_a_failed_download_leaves_no_temporary_file(tmp_path):
    import urllib.error

    target = tmp_path / "data" / "file.bin"
    with pytest.raises(urllib.error.URLError):
        download((tmp_path / "missing.bin").as_uri(), target, "0" * 64)
    assert list(target.parent.iterdir()) == []


# --- image data ------------------------------------------------------------------------------


def test_digits_are_normalized_stratified_and_fixed():
    from sklearn.datasets import load_digits

    images = load_digits_data(batch_size=32)
    x, y = next(iter(images.train_loader))
    assert x.shape == (32, 1, 8, 8) and x.dtype == torch.float32
    assert y.shape == (32,) and y.dtype == torch.long
    assert images.image_shape == (1, 8, 8) and images.classes[3] == "3"
    train_x, train_y = images.train_loader.dataset.tensors
    test_x, test_y = images.test_loader.dataset.tensors
    assert len(train_y) + len(test_y) == len(load_digits().target) == 1797
    assert abs(train_x.mean().item()) < 1e-5 and train_x.std().item() == pytest.approx(1, abs=1e-4)
    # stratified: each digit's share of the test split is close to its share overall
    for digit in range(10):
        assert (test_y == digit).float().mean().item() == pytest.approx(0.1, abs=0.01)
    again = load_digits_data(batch_size=32).test_loader.dataset.tensors
    assert torch.equal(again[1], test_y) and torch.equal(again[0], test_x)
    assert not torch.equal(load_digits_data(seed=1).test_loader.dataset.tensors[1], test_y)


def test_digits_upsampling():
    images = load_digits_data(batch_size=16, upsample_to=16)
    x, _ = next(iter(images.test_loader))
    assert x.shape == (16, 1, 16, 16) and images.image_shape == (1, 16, 16)
    with pytest.raises(ValueError, match="upsample_to"):
        load_digits_data(upsample_to=0)


def _idx_bytes(array: np.ndarray, code: int) -> bytes:
    # Written here from the format's definition, independently of read_idx.
    header = bytes([0, 0, code, array.ndim]) + b"".join(n.to_bytes(4, "big") for n in array.shape)
    big_endian = array.astype(array.dtype.newbyteorder(">"))
    return header + big_endian.tobytes()


def _write_fashion_mnist(root, compress, num_train=12, num_test=6):
    rng = np.random.default_rng(0)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (num_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": rng.integers(0, 10, num_train, dtype=np.uint8),
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (num_test, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": rng.integers(0, 10, num_test, dtype=np.uint8),
    }
    checksums = {}
    root.mkdir(parents=True, exist_ok=True)
    for name, array in arrays.items():
        raw = _idx_bytes(array, 0x08)
        name = name + ".gz" if compress else name
        (root / name).write_bytes(gzip.compress(raw) if compress else raw)
        checksums[name] = hashlib.md5((root / name).read_bytes()).hexdigest()
    return arrays, checksums


@pytest.mark.parametrize("compress", [True, False])
def test_read_idx_round_trips(tmp_path, compress):
    arrays, _ = _write_fashion_mnist(tmp_path, compress)
    suffix = ".gz" if compress else ""
    images = read_idx(tmp_path / f"train-images-idx3-ubyte{suffix}")
    assert images.dtype == torch.uint8
    assert np.array_equal(images.numpy(), arrays["train-images-idx3-ubyte"])
    floats = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    (tmp_path / "floats.idx").write_bytes(_idx_bytes(floats, 0x0D))
    assert np.array_equal(read_idx(tmp_path / "floats.idx").numpy(), floats)


def test_read_idx_rejects_bad_files(tmp_path):
    (tmp_path / "text.idx").write_bytes(b"hello world")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(tmp_path / "text.idx")
    truncated = _idx_bytes(np.zeros((3, 4), dtype=np.uint8), 0x08)[:-2]
    (tmp_path / "short.idx").write_bytes(truncated)
    with pytest.raises(ValueError, match=r"shape \(3, 4\)"):
        read_idx(tmp_path / "short.idx")


@pytest.mark.parametrize("compress", [True, False])
def test_load_fashion_mnist_from_written_files(tmp_path, compress):
    arrays, checksums = _write_fashion_mnist(tmp_path, compress)
    images = load_fashion_mnist(tmp_path, batch_size=4, checksums=checksums, upsample_to=32)
    x, y = next(iter(images.test_loader))
    assert x.shape == (4, 1, 32, 32) and images.image_shape == (1, 32, 32)
    assert y.tolist() == arrays["t10k-labels-idx1-ubyte"][:4].tolist()
    assert images.classes[9] == "Ankle boot" and len(images.classes) == 10
    raw = torch.tensor(arrays["train-images-idx3-ubyte"], dtype=torch.float32) / 255
    assert images.mean == pytest.approx(raw.mean().item(), rel=1e-3)
    assert (
        len(load_fashion_mnist(tmp_path, checksums=checksums, max_train=5).train_loader.dataset)
        == 5
    )


def test_load_fashion_mnist_verifies_checksums_and_never_downloads_by_default(tmp_path):
    _, checksums = _write_fashion_mnist(tmp_path, compress=True)
    # The real Fashion-MNIST checksums (the default) reject these made-up files.
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_fashion_mnist(tmp_path)
    wrong = dict(checksums, **{"t10k-labels-idx1-ubyte.gz": "0" * 32})
    with pytest.raises(ValueError, match="t10k-labels"):
        load_fashion_mnist(tmp_path, checksums=wrong)
    with pytest.raises(FileNotFoundError, match="download=True"):
        load_fashion_mnist(tmp_path / "missing")
    assert FASHION_MNIST_FILES["train-images-idx3-ubyte.gz"] == "8d4fb7e6c68d591d4c3dfef9ec88bf0d"


def test_fashion_mnist_download_is_verified_before_it_is_saved(tmp_path):
    remote = tmp_path / "remote"
    _, checksums = _write_fashion_mnist(remote, compress=True)
    root = tmp_path / "fashion"
    url = remote.as_uri() + "/"
    # The real checksums (the default) reject the made-up files: nothing is saved.
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_fashion_mnist(root, download=True, url=url)
    assert list(root.iterdir()) == []
    wrong = dict(checksums, **{"t10k-labels-idx1-ubyte.gz": "0" * 32})
    with pytest.raises(ValueError, match="t10k-labels"):
        load_fashion_mnist(root, download=True, checksums=wrong, url=url)
    assert sorted(path.name for path in root.iterdir()) == [  # the three good ones only
        "t10k-images-idx3-ubyte.gz",
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
    ]
    images = load_fashion_mnist(root, batch_size=4, download=True, checksums=checksums, url=url)
    assert len(images.test_loader.dataset) == 6
    for path in remote.iterdir():
        path.unlink()  # every file is there now: nothing is fetched again
    assert len(load_fashion_mnist(root, checksums=checksums, download=True, url=url).classes) == 10


# --- length bucketing ------------------------------------------------------------------------


def test_length_bucket_sampler_covers_every_example_once_and_groups_lengths():
    lengths = [
        int(n) for n in torch.randint(1, 50, (1000,), generator=torch.Generator().manual_seed(0))
    ]
    sampler = LengthBucketSampler(lengths, 16, torch.Generator().manual_seed(0), pool_batches=10)
    batches = list(sampler)
    assert len(batches) == len(sampler) == 63
    assert sorted(i for batch in batches for i in batch) == list(range(1000))
    spread = statistics.mean(
        max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches
    )
    assert spread < 10  # random batches of 16 would spread over about 45
    assert batches == list(LengthBucketSampler(lengths, 16, torch.Generator().manual_seed(0), 10))
    assert batches != list(sampler)  # the next epoch has another order


def test_bucketed_translation_batches_are_trimmed_and_test_order_kept():
    plain = load_translation_data(batch_size=16, num_pairs=400)
    bucketed = load_translation_data(batch_size=16, num_pairs=400, bucket_by_length=True)
    seen = 0
    for src, src_valid_len, tgt_input, tgt_valid_len, tgt_label in bucketed.train_loader:
        assert src.shape[1] == src_valid_len.max() <= bucketed.num_steps
        assert tgt_input.shape == tgt_label.shape
        assert tgt_label.shape[1] == tgt_valid_len.max()
        assert (tgt_input[:, 0] == bucketed.tgt_vocab.bos).all()
        seen += len(src)
    assert seen == len(bucketed.train_pairs)
    for trimmed, full in zip(bucketed.test_loader, plain.test_loader, strict=True):
        width = trimmed[0].shape[1]
        assert torch.equal(trimmed[0], full[0][:, :width])
        assert (full[0][:, width:] == plain.src_vocab.pad).all()
        assert torch.equal(trimmed[4], full[4][:, : trimmed[4].shape[1]])


# --- command line ----------------------------------------------------------------------------


def test_python_m_attention_book_data_prints_the_corpus_summary():
    import subprocess
    import sys

    command = [sys.executable, "-m", "attention_book.data", "--num-pairs", "300", "--seed", "1"]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    lines = result.stdout.splitlines()
    assert lines[0] == "built-in corpus (num_pairs=300, seed=1), lengths in tokens"
    assert lines[2].split()[0] == "train" and lines[-1].startswith("generation: ")


def test_random_shift_moves_whole_images_and_fills_with_background():
    images = torch.zeros(64, 1, 5, 5)
    images[:, 0, 2, 2] = 1.0  # one lit pixel in the centre of a blank image
    shifted = random_shift(images, 1, torch.Generator().manual_seed(0))
    assert shifted.shape == images.shape
    assert torch.equal(shifted.sum(dim=(1, 2, 3)), torch.ones(64))  # the pixel moved, whole
    rows, cols = (shifted[:, 0] == 1).nonzero()[:, 1:].T
    assert set(rows.tolist()) == {1, 2, 3} and set(cols.tolist()) == {1, 2, 3}
    assert torch.equal(random_shift(images, 0, torch.Generator()), images)
    background = torch.full((2, 1, 3, 3), -0.5)  # a normalized blank image is not 0
    assert torch.equal(random_shift(background, 1, torch.Generator()), background)


def test_balanced_subset_is_balanced_seeded_and_without_repeats():
    labels = torch.arange(10).repeat_interleave(torch.arange(10, 20))  # 10 to 19 per class
    chosen = balanced_subset(labels, 45, seed=3)
    assert len(set(chosen.tolist())) == 45
    counts = torch.bincount(labels[chosen], minlength=10)
    assert counts.max() - counts.min() <= 1
    assert torch.equal(chosen, balanced_subset(labels, 45, seed=3))
    assert not torch.equal(chosen, balanced_subset(labels, 45, seed=4))
    assert sorted(balanced_subset(labels, len(labels), 0).tolist()) == list(range(len(labels)))
    with pytest.raises(ValueError, match=r"size must be in \[1, 145\]"):
        balanced_subset(labels, 146, 0)
