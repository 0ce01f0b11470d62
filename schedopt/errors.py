"""The one error type that bad input raises."""

from __future__ import annotations

from typing import Any

__all__ = ["SchedoptError", "from_validation_error"]


class SchedoptError(ValueError):
    """Bad input: names the field and the value that is wrong.

    Parameters
    ----------
    message
        What is wrong, in one line.
    field
        Dotted path of the offending field (``layers[3].forward_s``), if known.
    value
        The offending value, if known.
    """

    def __init__(self, message: str, field: str | None = None, value: Any = None) -> None:
        self.field = field
        self.value = value
        if field is not None:
            message = f"{field}: {message} (got {_short_repr(value)})"
        super().__init__(" ".join(message.split("\n")))  # one line, whatever the input held


def _short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters (a hostile value stays one short line)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...({len(text):,} characters)"


def from_validation_error(exc: Any, what: str) -> SchedoptError:
    """Turn a pydantic ``ValidationError`` into a one-line :class:`SchedoptError`.

    Parameters
    ----------
    exc
        The pydantic ``ValidationError``.
    what
        The kind of document (``trace``, ``cluster``, ``plan``), prefixed to the field path.
    """
    err = exc.errors()[0]
    parts: list[str] = [what]
    for loc in err.get("loc", ()):
        if isinstance(loc, int):
            parts[-1] += f"[{loc}]"
        else:
            parts.append(str(loc))
    field = ".".join(parts)
    msg = str(err.get("msg", "invalid value"))
    msg = msg.removeprefix("Value error, ")
    value = err.get("input")
    if err.get("type") == "missing":
        return SchedoptError(f"{field}: field required")
    if isinstance(value, dict | list):
        return SchedoptError(f"{field}: {msg}")
    return SchedoptError(msg, field=field, value=value)
