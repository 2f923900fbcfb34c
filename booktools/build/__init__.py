"""The site build: the MkDocs plugin (`booktools.build.plugin`) and what its events do.

- `booktools.build.plugin`: `BookPlugin`, the events, in build order;
- `booktools.build.state`: what one build keeps between events;
- `booktools.build.structure`: the chapter map, the learning path, the plan of the book and the
  API reference (its pages, their nav and their index), made from the nav;
- `booktools.build.figures`: figures and build fragments drawn at build time, cached per figure;
- `booktools.build.code_keys`: the figures' key, a hash of the code they run without its prose;
- `booktools.build.listings`: listings of the package's source, docstrings cut to their summary;
- `booktools.build.notes`: the "first run trains" note before a block that trains;
- `booktools.build.notebooks`: one downloadable notebook per chapter;
- `booktools.build.katex`: every formula rendered by KaTeX when the site is built
  (``python -m booktools.build.katex install`` fetches KaTeX once, checked against
  ``katex-lock.json``);
- `booktools.build.versions`: the versions a chapter's code was tested with;
- `booktools.build.reading`: reading times, the core pages' budget, the deep dives' note;
- `booktools.build.search_index`: what the search index holds and leaves out;
- `booktools.build.attr_lists`: the built pages checked for attribute lists left as text;
- `booktools.build.referee`: the trained results' headline numbers against their recorded
  spread, after every build.
"""
