"""Which dtype differences are mixed precision: two floating-point dtypes (bfloat16 / float16 / float8 variants
against float32 / float64, or any float against another float). The product's first use case is an fp32 run
against a bf16 (or fp16) run: there every operator autocast runs in bf16 differs in dtype, and the reference's
rule (any dtype difference is an error) painted all of them red at a NormRelativeErr of 0.002 %. Such a pair is
graded by the numeric rules and carries a note instead; a difference in the kind of value (float against int or
bool, complex against real) stays an error.

The C compare (_rowtext_slots.h, float_dtype) applies the same test, character for character:
the text after the last "." (the whole text without one), ASCII only, lower-cased, that starts with "float" or
"bfloat" or is "half" or "double" ("torch.float32", "torch.bfloat16", "torch.float8_e4m3fn", MindSpore's
"Float16", numpy's "float64"). Complex ("torch.complex64", "torch.cfloat"), quantized ("torch.qint8") and
anything else are not floating point here."""
from typing import Any

__all__ = ["float_dtype", "mixed_precision"]


def float_dtype(text: Any) -> bool:
    """Whether a dump's dtype text names a real floating-point dtype."""
    if type(text) is not str or not text.isascii():
        return False
    tail = text.rsplit(".", 1)[-1].lower()
    return tail.startswith(("float", "bfloat")) or tail in ("half", "double")


def mixed_precision(debug_dtype: Any, bench_dtype: Any) -> bool:
    """Whether two differing dtypes are both floating point (the difference is a precision change, not a change
    in the kind of value)."""
    return debug_dtype != bench_dtype and float_dtype(debug_dtype) and float_dtype(bench_dtype)
