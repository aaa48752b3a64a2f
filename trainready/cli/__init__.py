"""The command line: the Typer app, its commands, consoles and progress."""
