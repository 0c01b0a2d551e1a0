from attnprof.cli import command

command()
