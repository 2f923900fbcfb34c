"""``python -m attention_book.data``: print the built-in corpus's statistics."""

from attention_book.data.corpus import main

if __name__ == "__main__":
    raise SystemExit(main())
