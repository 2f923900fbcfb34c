"""The result store (`attention_book.store`): cached results, declared keys, digests."""

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from attention_book.store import (
    Run,
    cache_dir,
    cache_path,
    cached,
    clear_cache,
    compute_seconds,
    declared_key,
    digest,
    is_cached,
    library_versions,
)
from attention_book.training import __main__ as training_cli
from attention_book.training.loop import History


@pytest.fixture(autouse=True)
def tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTENTION_BOOK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_cache_dir_follows_the_environment(tmp_path, monkeypatch, tmp_cache):
    assert cache_dir() == tmp_cache
    assert tmp_cache.is_dir()
    monkeypatch.delenv("ATTENTION_BOOK_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "attention-book"


def test_cached_miss_then_hit_then_clear(tmp_cache):
    calls = []

    def compute():
        calls.append(1)
        return {"state": {"w": torch.arange(3.0)}, "history": History([1.0, 0.5])}

    first = cached("demo", {"lr": 0.1, "sizes": [1, 2]}, compute)
    second = cached("demo", {"sizes": [1, 2], "lr": 0.1}, compute)  # key order is irrelevant
    assert len(calls) == 1
    assert torch.equal(second["state"]["w"], torch.arange(3.0))
    assert second["history"] == first["history"]
    cached("demo", {"lr": 0.2, "sizes": [1, 2]}, compute)  # another config: a miss
    cached("other", {"lr": 0.1, "sizes": [1, 2]}, compute)  # another name: a miss
    assert len(calls) == 3
    cached("demo", {"lr": 0.1, "sizes": [1, 2]}, compute, refresh=True)
    assert len(calls) == 4
    assert clear_cache() == 3
    assert list(tmp_cache.iterdir()) == []
    cached("demo", {"lr": 0.1, "sizes": [1, 2]}, compute)
    assert len(calls) == 5


def test_cached_notes_how_long_each_computation_took(tmp_cache):
    assert compute_seconds("slow") is None
    cached("slow", {"n": 1}, lambda: time.sleep(0.2) or 1)
    record = compute_seconds("slow")
    assert record["seconds"] >= 0.2 and record["date"].count("-") == 2 and record["cpus"] >= 1
    cached("slow", {"n": 1}, lambda: time.sleep(0.5) or 1)  # a hit: the record stays
    assert compute_seconds("slow") == record
    cached("quick", {"n": 1}, lambda: 2)
    assert compute_seconds("quick")["seconds"] < 0.2 and compute_seconds("slow") == record
    clear_cache()
    assert compute_seconds("slow") is None


CONCURRENT_SCRIPT = """
import sys, time
from pathlib import Path
from attention_book.store import cached

def compute():
    with open(sys.argv[1], "a") as log:
        log.write("computed\\n")
    time.sleep(3)
    return {"value": 42}

print(cached("shared", {"x": 1}, compute)["value"])
"""


def test_two_processes_compute_a_result_once(tmp_cache, tmp_path):
    # A parallel site build and the snippets may ask for the same training at once: the
    # second waits for the first and loads what it saved.
    log = tmp_path / "computed.txt"
    env = {**os.environ, "ATTENTION_BOOK_CACHE": str(tmp_cache)}
    command = [sys.executable, "-c", CONCURRENT_SCRIPT, str(log)]
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    for _ in range(300):  # until the first one is computing
        if log.exists():
            break
        time.sleep(0.05)
    second = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    outputs = [process.communicate(timeout=120)[0].strip() for process in (first, second)]
    assert outputs == ["42", "42"]
    assert log.read_text().splitlines() == ["computed"]


def test_cache_key_is_a_hash_of_name_and_config(tmp_cache):
    path = cache_path("demo", {"lr": 0.1})
    assert path.parent == tmp_cache
    assert path.name.startswith("demo-") and path.suffix == ".pt"
    assert path != cache_path("demo", {"lr": 0.10001})
    with pytest.raises(ValueError, match="JSON"):
        cache_path("demo", {"device": torch.device("cpu")})
    with pytest.raises(ValueError, match="name"):
        cache_path("../escape", {})


def test_cli_clears_the_cache(tmp_cache, capsys):
    cached("demo", {}, lambda: 1)
    assert training_cli.main(["clear-cache"]) == 0
    assert "removed 1" in capsys.readouterr().out
    assert not list(tmp_cache.glob("*.pt"))
    training_cli.main(["cache-dir"])
    assert capsys.readouterr().out.strip() == str(tmp_cache)


class _NotAllowlisted:
    pass


def test_cached_rejects_unsafe_values_at_once_and_recovers_from_damaged_files(tmp_cache):
    with pytest.raises(ValueError, match="cannot be cached"):
        cached("unsafe", {}, _NotAllowlisted)
    # No entry and no temporary file left behind (only the lock file `cached` holds).
    assert [p.suffix for p in tmp_cache.iterdir()] == [".lock"]
    cached("demo", {}, lambda: 1)
    cache_path("demo", {}).write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="unreadable"):
        assert cached("demo", {}, lambda: 2) == 2
    assert cached("demo", {}, lambda: 3) == 2


# --- declared keys ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Config:
    lr: float = 0.1
    sizes: tuple[int, ...] = (1, 2)


@dataclass
class _Mutable:
    lr: float = 0.1


def test_declared_key_holds_config_version_inputs_and_libraries():
    key = declared_key(_Config(), 3, corpus="abc", other_version=2)
    assert key == {
        "config": {"class": "_Config", "lr": 0.1, "sizes": (1, 2)},
        "version": 3,
        "inputs": {"corpus": "abc", "other_version": 2},
        "libraries": library_versions(),
    }
    assert cache_path("x", key) == cache_path("x", declared_key(_Config(), 3, corpus="abc",
                                                                other_version=2))  # fmt: skip
    for other in (
        declared_key(_Config(lr=0.2), 3, corpus="abc", other_version=2),  # another config
        declared_key(_Config(), 4, corpus="abc", other_version=2),  # a bumped version
        declared_key(_Config(), 3, corpus="abd", other_version=2),  # other data
    ):
        assert cache_path("x", other) != cache_path("x", key)


@pytest.mark.parametrize(
    ("config", "version", "message"),
    [
        ({"lr": 0.1}, 1, "config must be a dataclass instance, got dict"),
        (_Config, 1, "config must be a dataclass instance, got type"),
        (_Mutable(), 1, "config must be a frozen dataclass, got _Mutable"),
        (_Config(), 0, "version must be a positive integer, got 0"),
        (_Config(), True, "version must be a positive integer, got True"),
        (_Config(), "1", "version must be a positive integer, got '1'"),
    ],
)
def test_declared_key_rejects_what_cannot_be_declared(config, version, message):
    with pytest.raises(ValueError, match=message):
        declared_key(config, version)


def test_declared_key_rejects_inputs_that_are_not_json():
    with pytest.raises(ValueError, match="must hold only JSON values"):
        declared_key(_Config(), 1, data=torch.zeros(2))


def test_digest_tells_data_apart_by_values_dtype_and_shape():
    pairs = [("one", "un"), ("two", "deux")]
    assert digest(pairs) == digest([list(p) for p in pairs])  # as JSON, tuples are lists
    assert digest(pairs) != digest(pairs[::-1])
    assert len(digest(pairs)) == 16
    x = torch.arange(6.0)
    assert digest(x) == digest(x.clone()) != digest(x.reshape(2, 3))
    assert digest(x) != digest(x.double())
    assert digest(x, x) != digest(x)
    assert digest([x, x]) == digest([x.clone(), x.clone()])
    assert digest(torch.tensor(1.5)) != digest(torch.tensor(2.5))  # a 0-d tensor
    with pytest.raises(ValueError, match="digest takes JSON values and tensors, got object"):
        digest(object())


def test_is_cached_says_whether_a_result_is_stored(tmp_cache):
    key = declared_key(_Config(), 1)
    assert not is_cached("demo", key)
    cached("demo", key, lambda: 1)
    assert is_cached("demo", key)
    assert not is_cached("demo", declared_key(_Config(), 2))


def test_a_run_is_a_frozen_declaration():
    run = Run("demo", 1, probe=lambda: 1, result=lambda: 2, key=lambda: {})
    assert (run.headline, run.tolerance, run.module) == (None, 0.0, "")
    with pytest.raises(AttributeError):
        run.version = 2


def test_the_store_imports_nothing_of_the_package():
    import ast

    import attention_book.store

    tree = ast.parse(Path(attention_book.store.__file__).read_text(encoding="utf-8"))
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names]  # fmt: skip
    imported += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert imported and not [name for name in imported if name.startswith("attention_book")]
