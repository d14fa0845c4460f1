"""Arrow values as the JSON text `json.dumps` writes for the same Python values, a column at a time.

torch.profiler puts lists in a slice's args ("Input Dims": [[4, 32, 64], [], []], "Input type":
["float", "Scalar"]), and the Chrome trace reader keeps such an arg as its JSON text (protowire.annotation).
Made per value in Python that costs about 3 us an event, more than everything else the converter
does; here the text comes from pyarrow's kernels (casts, list joins), so a batch of list args stays
on the columnar path. Values whose text these kernels cannot give exactly (floats: Arrow's text of a
double is not Python's repr; strings outside printable ASCII, which json.dumps writes as ASCII escapes;
objects) give None, and the caller reads that batch the careful way.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def text(values: pa.Array) -> pa.Array | None:
    """Each value's JSON text (json.dumps's, default separators), or None if one cannot be made here.
    Null values (absent keys) come out null."""
    t = values.type
    if pa.types.is_null(t):
        return pa.nulls(len(values), pa.string())
    if pa.types.is_int64(t):
        return pc.cast(values, pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(values, "true", "false")
    if pa.types.is_string(t):
        if (
            not pc.all(pc.string_is_ascii(values)).as_py()
            or pc.any(pc.match_substring_regex(values, "[\\x00-\\x1f]")).as_py()
        ):
            return None
        escaped = pc.replace_substring(pc.replace_substring(values, "\\", "\\\\"), '"', '\\"')
        return pc.binary_join_element_wise('"', escaped, '"', "")
    if pa.types.is_list(t):
        inner = text(pc.list_flatten(values))
        if inner is None:
            return None
        offsets = values.offsets.to_numpy()
        lists = pa.ListArray.from_arrays(pa.array(offsets - offsets[0], pa.int32()), inner, mask=values.is_null())
        return pc.binary_join_element_wise("[", pc.binary_join(lists, ", "), "]", "")
    return None
