"""The sandbox's one exception type: its message names the cause and, when known, the log file."""


class SandboxError(RuntimeError):
    """Raised when the sandbox cannot start, find or stop what it manages."""
