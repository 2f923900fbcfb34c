"""MathJax, served from the site itself: the book loads nothing from another host."""

from __future__ import annotations

from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files


def add_mathjax(files: Files, config) -> None:
    """Add MathJax 3 from the installed ``django-static-mathjax`` package to the site.

    Only the ``tex-mml-chtml`` bundle and the components it loads go to the site
    (``assets/vendor/mathjax/``), where ``mkdocs.yml`` loads it.

    Args:
        files: The site's files (MathJax's are appended).
        config: The mkdocs configuration.

    Raises:
        PluginError: If the package is not installed.
    """
    import mathjax  # the django-static-mathjax distribution; it needs no Django to import

    es5 = Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"
    if not (es5 / "tex-mml-chtml.js").exists():
        raise PluginError(f"MathJax not found at {es5}; run `make setup`")
    for path in sorted(es5.rglob("*")):
        relative = path.relative_to(es5)
        is_other_bundle = len(relative.parts) == 1 and relative.name != "tex-mml-chtml.js"
        if path.is_file() and not is_other_bundle:
            uri = f"assets/vendor/mathjax/{relative.as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
