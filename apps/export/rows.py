"""Export rows as JSONL bytes and as Arrow record batches, built in Python from plain columns.

The page query selects every column in a form Postgres sends cheaply (``raw_sql``): integers,
floats, booleans and text as they are, JSON lists (``turns``, ``passages``) as their text, integer
arrays as their text (JSONL) or in Postgres' binary array form (Parquet: parsed by numpy). From
such rows this module makes

- JSONL lines byte for byte equal to the ones Postgres builds with apps/export/sql.py (the
  reference formatters: a float is always a float literal, ``null`` for NaN / infinities, strings
  escaped as Postgres' ``to_json`` does, turns / passages with exactly their documented keys);
- Arrow record batches of the kind's schema (one Parquet row group each) with the same values.

Rare values are "odd" and come from the reference instead, the line export_sql has Postgres build
for that row (``fallback(ids) -> {id: line}``): turns / passages whose fields hold anything but
strings where strings are documented (numbers, objects, ...), and whole floats from 1e15 on (JSONL).
"""
from __future__ import annotations

import json
import math
import re
import struct
from json.encoder import encode_basestring

import numpy as np
import orjson
import pyarrow as pa

_ITERATION = re.compile(r"-?(0|[1-9][0-9]{0,17})")  # export_sql's (with fullmatch: Postgres' $ is the end)
NULL = "null"


class Odd(Exception):
    """A value this module does not encode itself: take the reference line of its row."""


# ---- SQL -----------------------------------------------------------------------------------------

RAW = {  # type code -> SQL of the plain value sent for column x
    "int": "{x}", "bool": "{x}", "float": "({x})::float8", "str": "({x})::text", "iteration": "({x})::text",
    "ints": "({x})::text", "turns": "({x})::text", "passages": "({x})::text", "json": "({x})::text",
}


def raw_sql(columns: list[tuple[str, str]], inner_sql: str, binary_arrays: bool = False) -> str:
    """The plain values of every row of the page query ``inner_sql`` (select list ``c0, c1, ...``;
    ``c0`` is the cursor), in cursor order; ``binary_arrays``: integer arrays in Postgres' binary
    form (``array_send``: bytes in a binary cursor) instead of as text."""
    raw = dict(RAW, ints="array_send({x})") if binary_arrays else RAW
    exprs = ", ".join(raw[code].format(x=f"q.c{i}") for i, (_, code) in enumerate(columns))
    return f"SELECT {exprs} FROM ({inner_sql}) q ORDER BY q.c0"


# ---- values as JSON text -------------------------------------------------------------------------

def float_json(v) -> str:
    """export_sql's float: ``null`` for NULL / NaN / infinities, ``<integer>.0`` for whole numbers
    under 1e15, else Postgres' float8 text (shortest digits; exponent form from 1e15 or below 1e-4).
    Whole numbers from 1e15 on are Odd (Postgres writes some of them with more digits than needed)."""
    if v is None or v != v or v in (math.inf, -math.inf):
        return NULL
    if v.is_integer():
        if -1e15 < v < 1e15:
            return "%d.0" % v
        raise Odd
    text = repr(v)
    if 1e15 <= abs(v) and "e" not in text:  # Python writes these positionally, Postgres does not
        sign, text = ("-", text[1:]) if text[0] == "-" else ("", text)
        whole, _, frac = text.partition(".")
        digits = (whole + frac).rstrip("0")
        text = f"{sign}{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e+{len(whole) - 1}"
    return text


def str_json(v) -> str:
    """A JSON string escaped as Postgres' to_json does (the same characters, lower-case \\u00xx)."""
    return '""' if v is None else encode_basestring(v)


def int_json(v) -> str:
    return NULL if v is None else "%d" % v


def bool_json(v) -> str:
    return NULL if v is None else ("true" if v else "false")


def iteration_json(v) -> str:
    return v if v is not None and _ITERATION.fullmatch(v) else NULL


def ints_json(v) -> str:
    """Postgres' integer array text ``{1,2}`` as ``array_to_json`` writes it: ``[1,2]``."""
    if v is None:
        return "[]"
    if v[0] == "[":  # explicit bounds: [0:1]={1,2}
        v = v.split("=", 1)[1]
    if v[1] == "{" or "N" in v:  # 2-d, NULL elements
        return v.replace("NULL", "null").translate(_BRACKETS)
    return "[" + v[1:-1] + "]"


_BRACKETS = str.maketrans("{}", "[]")


def _elements(text) -> list:
    if text is None or text == "[]":
        return []
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise Odd from None
    return value if type(value) is list else []


def _text(v) -> str:
    if v is None:
        return ""
    if type(v) is not str:
        raise Odd
    return v


def turns_of(text) -> list[tuple[str, str]]:
    """(role, text) of each object of a stored turns list (Odd when a field is not a string)."""
    return [(_text(t.get("role")), _text(t.get("text"))) for t in _elements(text) if type(t) is dict]


def _score(v):
    if type(v) is float:
        return v if math.isfinite(v) else None
    if type(v) is int:
        if abs(v) > 2**53:
            raise Odd
        return float(v)
    return None


def passages_of(text) -> list[tuple[str, str, str, str, float | None]]:
    """(document_id, chunk_id, title, text, score) of each object of a stored passages list."""
    return [(_text(p.get("document_id")), _text(p.get("chunk_id")), _text(p.get("title")), _text(p.get("text")),
             _score(p.get("score"))) for p in _elements(text) if type(p) is dict]


def _plain_turns(value) -> bool:
    """Every element an object of exactly two strings, role and text (in jsonb's key order)."""
    for t in value:
        if type(t) is not dict or len(t) != 2 or type(t.get("role")) is not str or type(t.get("text")) is not str:
            return False
    return True


def turns_json(v) -> str:
    if v is None or v == "[]":
        return "[]"
    value = orjson.loads(v)
    if type(value) is list and _plain_turns(value):
        # jsonb's own text, whose strings Postgres escaped as to_json does; only the spaces after the
        # structural ':' and ',' go (a '"' after '{' or ' ' is never inside a string: there it is '\"')
        return v.replace('}, {"role": ', '},{"role":').replace('{"role": ', '{"role":').replace(', "text": ',
                                                                                                ',"text":')
    return "[" + ",".join(['{"role":%s,"text":%s}' % (str_json(r), str_json(t)) for r, t in turns_of(v)]) + "]"


def passages_json(v) -> str:
    if v is None or v == "[]":
        return "[]"
    return "[" + ",".join(['{"document_id":%s,"chunk_id":%s,"title":%s,"text":%s,"score":%s}' % (
        str_json(d), str_json(c), str_json(t), str_json(x), float_json(s)) for d, c, t, x, s in passages_of(v)]) + "]"


def json_json(v) -> str:
    """A stored JSON value (jsonb's text) as it is: JSONL holds the object, not a string of it."""
    return "{}" if v is None else v


ENCODERS = {"int": int_json, "float": float_json, "str": str_json, "bool": bool_json, "iteration": iteration_json,
            "ints": ints_json, "turns": turns_json, "passages": passages_json, "json": json_json}


def jsonl(columns: list[tuple[str, str]], rows: list[tuple], fallback) -> bytes:
    """The JSONL bytes of a page of plain rows (each line ends with a newline)."""
    template = "{" + ",".join(f"{json.dumps(name)}:%s" for name, _ in columns) + "}"
    encoders = [ENCODERS[code] for _, code in columns]
    lines, odd = [], {}
    for row in rows:
        try:
            lines.append(template % tuple([enc(v) for enc, v in zip(encoders, row)]))
        except Odd:
            odd[len(lines)] = row[0]
            lines.append("")
    if odd:
        reference = fallback(list(odd.values()))
        for index, row_id in odd.items():
            lines[index] = reference[row_id]
    lines.append("")
    return "\n".join(lines).encode()


# ---- values as Arrow arrays ----------------------------------------------------------------------

TURN = pa.struct([("role", pa.string()), ("text", pa.string())])
PASSAGE = pa.struct([("document_id", pa.string()), ("chunk_id", pa.string()), ("title", pa.string()),
                     ("text", pa.string()), ("score", pa.float64())])
TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string(), "bool": pa.bool_(), "iteration": pa.int64(),
         "turns": pa.list_(TURN), "passages": pa.list_(PASSAGE), "ints": pa.list_(pa.int64()),
         "json": pa.string()}  # JSON values: their text (Parquet's column types are fixed; the keys are not)
NESTED = {"turns": (turns_of, TURN), "passages": (passages_of, PASSAGE)}
# Arrow memory from the C heap (trimmed after every row group: export.release_memory) rather than
# Arrow's default mimalloc pool, which keeps tens of MB of freed pages resident in a long-lived server
POOL = pa.system_memory_pool()  # for the Parquet writer (apps/api/__init__.py sets the default too)


# Arrays are made from numpy buffers (Array.from_buffers), not pa.array: pa.array imports pandas
# (tens of MB in a server that has no other use for it) and converts object by object.

def _validity(valid):
    """The validity bitmap of a boolean mask (None: no nulls)."""
    return None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))


def _numbers(values, dtype, arrow_type, finite: bool = False) -> pa.Array:
    """Integers or floats (None, and for ``finite`` NaN / infinities, as nulls)."""
    n = len(values)
    try:
        data, valid = np.fromiter(values, dtype, n), None
    except TypeError:  # None among them
        valid = np.fromiter((v is not None for v in values), np.bool_, n)
        data = np.fromiter((0 if v is None else v for v in values), dtype, n)
    if finite:
        ok = np.isfinite(data)
        valid = ok if valid is None else valid & ok
    return pa.Array.from_buffers(arrow_type, n, [_validity(valid), pa.py_buffer(data)])


def _floats(values) -> pa.Array:
    return _numbers(values, np.float64, pa.float64(), finite=True)


def _ints64(values) -> pa.Array:
    return _numbers(values, np.int64, pa.int64())


def _bools(values) -> pa.Array:
    n = len(values)
    valid = np.fromiter((v is not None for v in values), np.bool_, n)
    data = np.fromiter((v is True for v in values), np.bool_, n)
    bits = pa.py_buffer(np.packbits(data, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), n, [_validity(valid), bits])


def _strs(values) -> pa.Array:
    """Strings (None as ""): their UTF-8 bytes joined, and offsets from their byte lengths."""
    values = ["" if v is None else v for v in values]
    joined = "".join(values)
    data = joined.encode()
    if len(data) == len(joined):  # ASCII: a character is a byte
        lengths = np.fromiter(map(len, values), np.int64, len(values))
    else:
        lengths = np.fromiter((len(v.encode()) for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError("a page of the export holds more than 2 GB of text in one column; export with a smaller page")
    return pa.Array.from_buffers(pa.string(), len(values), [None, pa.py_buffer(offsets.astype(np.int32)),
                                                            pa.py_buffer(data)])


def _iterations(values) -> pa.Array:
    return _ints64([int(v) if v is not None and _ITERATION.fullmatch(v) else None for v in values])


def _int_lists(lists: list[list]) -> pa.Array:
    """list<int64> of Python lists (None elements as nulls)."""
    return _list_array([len(v) for v in lists], _ints64([x for v in lists for x in v]))


def _list_array(lengths, values: pa.Array) -> pa.Array:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.ListArray.from_buffers(pa.list_(values.type), len(lengths), [None, pa.py_buffer(offsets)],
                                     children=[values])


def _be32(buf: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """Big-endian int32 at byte positions ``pos`` of ``buf`` (array headers)."""
    return buf[pos[:, None] + np.arange(4)].copy().view(">i4").ravel().astype(np.int64)


_WIDTH = {21: 2, 23: 4, 20: 8}  # element type oid (int2, int4, int8) -> bytes


def _ints(values) -> pa.Array:
    """Integer arrays of a page as list<int64>: Postgres' binary form (ndim, has-nulls flag, element
    type; per dimension its size and lower bound; per element its byte length and big-endian value)
    parsed by numpy for one-dimensional arrays without NULLs, in Python otherwise; text in Python."""
    if any(type(v) is str for v in values):
        return _int_lists([orjson.loads(ints_json(v)) for v in values])
    sizes = np.array([0 if v is None else len(v) for v in values], dtype=np.int64)
    buf = np.frombuffer(b"".join([v for v in values if v is not None]), np.uint8)
    starts = (np.cumsum(sizes) - sizes)[sizes > 0]
    if len(starts) == 0:
        return _int_lists([[] for _ in values])
    ndim, nulls, oids = _be32(buf, starts), _be32(buf, starts + 4), _be32(buf, starts + 8)
    width = _WIDTH.get(int(oids[0]), 0)
    counts = np.where(ndim == 1, _be32(buf, np.where(ndim == 1, starts + 12, starts)), 0)
    if (not width or (oids != oids[0]).any() or (ndim > 1).any() or nulls.any()
            or (sizes[sizes > 0] != np.where(ndim == 1, 20 + counts * (4 + width), 12)).any()):
        return _int_lists([_binary_array_py(v) for v in values])
    first = np.repeat(starts + 24 - (np.cumsum(counts) - counts) * (4 + width), counts)
    positions = first + np.arange(counts.sum()) * (4 + width)  # of each element's first (high) byte
    if width < 8:  # every value sits at a multiple of its width (arrays are 20 + n * (4 + width) bytes)
        numbers = buf.view(f">i{width}")[positions // width].astype(np.int64)
    else:
        numbers = buf[positions].astype(np.int64)
        for k in range(1, width):
            numbers = (numbers << 8) | buf[positions + k]
    lengths = np.zeros(len(values), np.int64)
    lengths[sizes > 0] = counts
    return _list_array(lengths, pa.Array.from_buffers(pa.int64(), len(numbers), [None, pa.py_buffer(numbers)]))


def _binary_array_py(data) -> list:
    """One binary integer array as a list (NULL elements as None); more than one dimension is refused."""
    if data is None:
        return []
    ndim, _, oid = struct.unpack_from(">iiI", data)
    if ndim > 1:
        raise ValueError("an integer array column holds a multi-dimensional array; exports need one dimension")
    if ndim == 0:
        return []
    count, out, pos, width = struct.unpack_from(">i", data, 12)[0], [], 20, _WIDTH[oid]
    for _ in range(count):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0:
            out.append(None)
            continue
        out.append(int.from_bytes(data[pos:pos + size], "big", signed=True))
        pos += size
    return out


BUILDERS = {"int": _ints64, "float": _floats, "str": _strs, "bool": _bools, "iteration": _iterations, "ints": _ints,
            "json": lambda values: _strs(["{}" if v is None else v for v in values])}


def _nested(code: str, values, ids, odd: set) -> list:
    """Each row's list of field tuples (None for an odd row, whose id is added to ``odd``)."""
    parse = NESTED[code][0]
    out = []
    for v, row_id in zip(values, ids):
        try:
            out.append(parse(v))
        except Odd:
            odd.add(row_id)
            out.append(None)
    return out


def _nested_array(code: str, items: list[list[tuple]]) -> pa.Array:
    struct_type = NESTED[code][1]
    flat = [item for row in items for item in row]
    fields = list(zip(*flat)) if flat else [[] for _ in range(struct_type.num_fields)]
    children = [(_floats if field.type == pa.float64() else _strs)(list(v)) for field, v in zip(struct_type, fields)]
    structs = pa.StructArray.from_arrays(children, fields=list(struct_type))
    return _list_array(np.array([len(row) for row in items], np.int64), structs)


def record_batch(columns: list[tuple[str, str]], rows: list[tuple], fallback) -> pa.RecordBatch:
    """The Arrow record batch of a non-empty page of plain rows, with the kind's schema."""
    schema = pa.schema([(name, TYPES[code]) for name, code in columns])
    data = list(zip(*rows))
    nested, odd = {}, set()
    for i, (_, code) in enumerate(columns):
        if code in NESTED:
            nested[i] = _nested(code, data[i], data[0], odd)
    if odd:
        reference = {row_id: json.loads(line) for row_id, line in fallback(sorted(odd)).items()}
        for i, items in nested.items():
            name, names = columns[i][0], [f.name for f in NESTED[columns[i][1]][1]]
            nested[i] = [[tuple(e[n] for n in names) for e in reference[row_id][name]] if v is None else v
                         for v, row_id in zip(items, data[0])]
    arrays = [_nested_array(code, nested[i]) if i in nested else BUILDERS[code](data[i])
              for i, (_, code) in enumerate(columns)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
