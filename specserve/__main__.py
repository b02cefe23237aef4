from specserve.cli import run_command

run_command()
