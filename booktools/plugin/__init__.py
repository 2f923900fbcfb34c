"""The site build: the MkDocs plugin (`booktools.plugin.events`) and what its events do.

- `booktools.plugin.events`: `BookPlugin`, the events, in build order;
- `booktools.plugin.state`: what one build keeps between events;
- `booktools.plugin.structure`: the chapter map, the learning path, the plan of the book and the
  API reference (its pages, their nav and their index), made from the nav;
- `booktools.plugin.figures`: figures and build fragments drawn at build time, cached per figure;
- `booktools.plugin.code_keys`: the figures' key, a hash of the code they run without its prose;
- `booktools.plugin.listings`: listings of the package's source, docstrings cut to their summary;
- `booktools.plugin.notes`: the "first run trains" note before a block that trains;
- `booktools.plugin.notebooks`: one downloadable notebook per chapter;
- `booktools.plugin.katex`: every formula rendered by KaTeX when the site is built
  (``python -m booktools.plugin.katex install`` fetches KaTeX once, checked against
  ``katex-lock.json``);
- `booktools.plugin.versions`: the versions a chapter's code was tested with;
- `booktools.plugin.reading`: reading times, the core pages' budget, the deep dives' note;
- `booktools.plugin.search_index`: what the search index holds and leaves out;
- `booktools.plugin.attr_lists`: the built pages checked for attribute lists left as text;
- `booktools.plugin.referee`: the trained results' headline numbers against their recorded
  spread, after every build.
"""
