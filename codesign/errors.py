"""Errors the user can cause. The CLI turns them into one-line messages and exit code 2."""


class CodesignError(Exception):
    """Base class for every error caused by user input."""


class SpecError(CodesignError):
    """An input spec is invalid: names the field and the allowed values."""


class InfeasiblePlan(CodesignError):
    """A parallelism plan cannot run on the given model and system (reason in the message)."""
