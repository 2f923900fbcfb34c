"""The built site checked in headless Chromium: ``python -m booktools.browser.check site``.

- `booktools.browser.check`: the command, over every page in light and dark;
- `booktools.browser.page`: what it checks on one page;
- `booktools.browser.scripts`: the JavaScript it runs in the page;
- `booktools.browser.verdicts`: the verdicts it keeps for pages that did not change;
- `booktools.browser.serve`: the local server and Chromium.
"""
