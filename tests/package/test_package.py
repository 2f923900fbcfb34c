import subprocess
import sys

import attention_book


def test_every_reexported_name_exists():
    missing = [name for name in attention_book.__all__ if not hasattr(attention_book, name)]
    assert missing == []


def test_version_is_a_release_string():
    major, minor, patch = attention_book.__version__.split(".")
    assert all(part.isdigit() for part in (major, minor, patch))


def test_package_imports_without_triton():
    # Make `import triton` fail, as on a machine without it, then import the whole package.
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import attention_book, attention_book.flash\n"
        "import torch\n"
        "q = torch.randn(1, 1, 4, 8)\n"
        "out = attention_book.flash_attention(q, q, q, backend='reference')\n"
        "print(tuple(out.shape))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(1, 1, 4, 8)"
