import sys

from gpuwait.catalog import render_markdown

sys.stdout.write(render_markdown())
