"""Builds the manual: `build_html.py SOURCE_DIR OUT_DIR` runs Sphinx's HTML builder with warnings
as errors (every warning reported, then a failure), from a clean environment each time."""

import sys
import tempfile

from sphinx.cmd.build import build_main


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    print(__doc__, file=sys.stderr)
    return 2
  source, out = argv
  with tempfile.TemporaryDirectory() as doctrees:
    return build_main(["-b", "html", "-W", "--keep-going", "-q", "-E",
                       "-d", doctrees, source, out])


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
