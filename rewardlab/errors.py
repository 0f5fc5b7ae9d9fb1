"""Errors a user can fix.

Anything raised as :class:`RewardlabError` reaches a CLI user as one line (``error: ...``) and a
non-zero exit status, never as a traceback. Raise it with a message that says what to do.
"""


class RewardlabError(Exception):
    """A problem with the user's input or environment, explained in one actionable line."""

    exit_code = 2
