"""Text cells no spreadsheet runs as a formula: one rule for `tbprobe compare`'s CSV and XLSX and the plugin's
CSV export (a dump's names are its writer's to choose)."""
import math

__all__ = ["formula_safe"]


def formula_safe(text: str) -> str:
    """`text`, quoted with a leading `'` where Excel would run it as a formula: it starts with = + @, or with - and
    is not a number (or a percentage)."""
    if text[:1] in ("=", "+", "@") or (text[:1] == "-" and not _number(text)):
        return "'" + text
    return text


def _number(text: str) -> bool:
    try:
        number = float(text.strip().rstrip("%"))
    except ValueError:
        return False
    return not math.isnan(number)
