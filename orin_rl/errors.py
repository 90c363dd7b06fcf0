"""The base of every error a user can fix by changing input; the CLI prints these as one line."""


class OrinError(Exception):
    """Bad input, file or platform: the message says what happened and what to do."""
