"""`python -m hpstudy` = the `hpstudy` command."""

from hpstudy.cli import hpstudy_command

hpstudy_command()
