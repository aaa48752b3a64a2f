"""How an error raised by a case is named, wherever cases run (a worker, a rank).

A case's error is any BaseException but those that end the process (`PROCESS_EXITS`: re-raised
where a case's errors are caught): torch.distributed.checkpoint's CheckpointException, for one,
derives from BaseException. It is named in one line (`error_head`) by its root cause
(`root_cause`): for a CheckpointException, which gathers every rank's failure, the lowest rank's.
"""

from __future__ import annotations

PROCESS_EXITS = (SystemExit, KeyboardInterrupt, GeneratorExit)


def root_cause(exc: BaseException) -> BaseException:
    """The error behind `exc`: a CheckpointException's lowest rank's own (its `failures`: rank ->
    (exception, stack)); otherwise `exc` itself."""
    failures = getattr(exc, "failures", None)
    if isinstance(failures, dict) and failures:
        first = failures[min(failures)]
        cause = first[0] if isinstance(first, tuple) and first else first
        if isinstance(cause, BaseException):
            return cause
    return exc


def error_head(exc: BaseException, limit: int = 500) -> str:
    """One line naming `exc` by its root cause: 'ValueError: bad shape', or 'CheckpointException
    from ranks [0, 1]: NotImplementedError: ...' where it gathered other errors."""
    root = root_cause(exc)
    text = f"{type(root).__name__}: {root}".strip().splitlines()[0] if str(root) else ""
    head = text or type(root).__name__
    if root is not exc:
        head = f"{type(exc).__name__} from ranks {sorted(exc.failures)}: {head}"  # type: ignore[attr-defined]
    return head[:limit]
