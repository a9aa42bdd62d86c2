"""Subcommands of the ``goodput`` command line (one module each)."""
