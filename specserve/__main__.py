from router.cli import run_command

run_command()
