"""Exceptions of the trainer package: one base, each also the builtin it refines."""


class TrainerError(Exception):
    """Base of the trainer's expected errors; the CLI prints them as one line."""
