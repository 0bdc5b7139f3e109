"""python -m wherein.search.cli"""

from wherein.search.cli import cli

cli()
