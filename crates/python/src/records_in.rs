//! Records a caller hands `Producer.send` and `Producer.send_many`, converted to
//! [`ProducerRecord`]s (`send`) or [`EncodedRecord`]s (`send_many`: keys and headers encoded
//! straight from the lists or Arrow columns into one shared buffer) before anything is sent: a bad value, key, header or timestamp raises
//! `InvalidArgumentError` naming the row, and no record of the call goes out.
//!
//! | argument | Python | Arrow |
//! |---|---|---|
//! | value | `bytes`, `bytearray`, `str` | `binary`, `large_binary`, `string`, `large_string`; no nulls |
//! | key | the same, or `None` | the same; a null is no key |
//! | headers | `None`, a `dict` of name to value, or a list of `(name, value)` pairs; name `str`, value as a key (`None`: a null value) | `list<struct<key: string, value: binary>>` (or `large_list`, `large_string`, `large_binary`); a null list is no headers |
//! | timestamp | `None` (the producer's clock), `int` microseconds since the epoch UTC, or a timezone-aware `datetime` | `timestamp` of any unit (a time zone-less one read as UTC) or `int64` microseconds; a null is the producer's clock |

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int64Type, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType,
};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BinaryArray, LargeBinaryArray, LargeStringArray,
    StringArray, StructArray, make_array,
};
use arrow_data::ArrayData;
use arrow_pyarrow::FromPyArrow;
use arrow_schema::{DataType, TimeUnit};
use bytes::Bytes;
use bytes::BytesMut;
use dafka_node::{
    EncodedRecord, Header, HeaderRef, ProducerRecord, RecordMeta, TimestampType, is_header_name,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyInt, PyList, PyString, PyTuple};

use crate::errors;

/// One record from `send`'s arguments.
pub(crate) fn one_record(
    value: &Bound<'_, PyAny>,
    key: Option<&Bound<'_, PyAny>>,
    headers: Option<&Bound<'_, PyAny>>,
    timestamp: Option<&Bound<'_, PyAny>>,
) -> PyResult<ProducerRecord> {
    Ok(ProducerRecord {
        value: bytes_of(value, "a record value")?,
        key: key
            .map(|k| optional_bytes(k, "a record key"))
            .transpose()?
            .flatten(),
        headers: headers.map(headers_of).transpose()?.flatten(),
        timestamp: timestamp.map(timestamp_of).transpose()?.flatten(),
    })
}

/// The records of `send_many`: `values` a list (or iterable) of values or an Arrow array of
/// them with `keys`, `headers`, `timestamps` alike (as many), or a `RecordBatch` / `Table`
/// with a `value` column and optional `key`, `headers`, `timestamp` columns.
pub(crate) fn records_of(
    values: &Bound<'_, PyAny>,
    keys: Option<&Bound<'_, PyAny>>,
    headers: Option<&Bound<'_, PyAny>>,
    timestamps: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<EncodedRecord>> {
    if values.hasattr("column_names")? && values.hasattr("schema")? {
        if keys.is_some() || headers.is_some() || timestamps.is_some() {
            return Err(errors::invalid(
                "send_many: with a RecordBatch or Table, keys, headers and timestamps come from \
                 its key, headers and timestamp columns, not from arguments",
            ));
        }
        return table_records(values);
    }
    let values = column(values, "values", values_in)?;
    let n = values.len();
    let keys = keys
        .map(|k| same_len(column(k, "keys", keys_in)?, n, "keys"))
        .transpose()?;
    let headers = headers
        .map(|h| -> PyResult<Headers> {
            let column = headers_column(h)?;
            check_len(column.len(), n, "headers")?;
            Ok(column)
        })
        .transpose()?;
    let timestamps = timestamps
        .map(|t| same_len(column(t, "timestamps", timestamps_in)?, n, "timestamps"))
        .transpose()?;
    Ok(assemble(values, keys, headers, timestamps))
}

/// The columns of a `RecordBatch` or `Table`: `value` (required), `key`, `headers`,
/// `timestamp`; other columns (as Spark's `topic`, `partition`, ...) are ignored.
fn table_records(table: &Bound<'_, PyAny>) -> PyResult<Vec<EncodedRecord>> {
    let names: Vec<String> = table.getattr("column_names")?.extract()?;
    let get = |name: &str| -> PyResult<Option<ArrayRef>> {
        if !names.iter().any(|n| n == name) {
            return Ok(None);
        }
        let mut col = table.call_method1("column", (name,))?;
        if col.hasattr("combine_chunks")? {
            col = col.call_method0("combine_chunks")?;
        }
        Ok(Some(make_array(ArrayData::from_pyarrow_bound(&col)?)))
    };
    let Some(values) = get("value")? else {
        return Err(errors::invalid(format!(
            "send_many: the batch has no 'value' column (its columns: {})",
            names.join(", ")
        )));
    };
    let values = values_in(values.as_ref())?;
    let keys = get("key")?.map(|a| keys_in(a.as_ref())).transpose()?;
    let headers = get("headers")?
        .map(|a| headers_in(a.as_ref()).map(Headers::Arrow))
        .transpose()?;
    let timestamps = get("timestamp")?
        .map(|a| timestamps_in(a.as_ref()))
        .transpose()?;
    Ok(assemble(values, keys, headers, timestamps))
}

/// A `headers` argument: a list of lists of `Header`s (from Python), or an Arrow column read
/// in place.
enum Headers {
    Lists(Vec<Option<Vec<Header>>>),
    Arrow(ArrowHeaders),
}

impl Headers {
    fn len(&self) -> usize {
        match self {
            Headers::Lists(l) => l.len(),
            Headers::Arrow(a) => a.rows.len(),
        }
    }
}

/// An Arrow `headers` column: per row the range of its entries (`None`: a null list), and
/// every entry's name (checked UTF-8) and value.
struct ArrowHeaders {
    rows: Vec<Option<(usize, usize)>>,
    names: Flat,
    values: Flat,
}

impl ArrowHeaders {
    fn row(&self, i: usize) -> Option<impl ExactSizeIterator<Item = HeaderRef<'_>> + Clone> {
        let (from, to) = self.rows[i]?;
        Some((from..to).map(|j| HeaderRef {
            name: self.names.get(j).unwrap_or_default(),
            value: self.values.get(j),
        }))
    }
}

/// The records, each one's key and headers encoded straight into one buffer they share (no
/// list of headers built per record).
fn assemble(
    values: Vec<Bytes>,
    keys: Option<Vec<Option<Bytes>>>,
    headers: Option<Headers>,
    timestamps: Option<Vec<Option<i64>>>,
) -> Vec<EncodedRecord> {
    let mut buf = BytesMut::new();
    values
        .into_iter()
        .enumerate()
        .map(|(i, value)| {
            let key = keys.as_ref().and_then(|k| k[i].as_deref());
            let timestamp = timestamps.as_ref().and_then(|t| t[i]);
            let at = timestamp.unwrap_or(0);
            let meta = match &headers {
                None => RecordMeta::encode_in(&mut buf, at, TimestampType::CreateTime, key, None),
                Some(Headers::Lists(l)) => RecordMeta::encode_in(
                    &mut buf,
                    at,
                    TimestampType::CreateTime,
                    key,
                    l[i].as_deref(),
                ),
                Some(Headers::Arrow(a)) => RecordMeta::encode_refs_in(
                    &mut buf,
                    at,
                    TimestampType::CreateTime,
                    key,
                    a.row(i),
                ),
            };
            EncodedRecord {
                value,
                meta,
                timestamped: timestamp.is_some(),
            }
        })
        .collect()
}

/// A `headers` argument as a list of header lists or, given as Arrow, read in place.
fn headers_column(obj: &Bound<'_, PyAny>) -> PyResult<Headers> {
    if let Some(array) = arrow_of(obj)? {
        return headers_in(array.as_ref()).map(Headers::Arrow);
    }
    // Not Arrow (that is taken above): a list or iterable of header lists.
    let not_arrow = |_: &dyn Array| Err(errors::invalid("send_many: headers"));
    column(obj, "headers", not_arrow).map(Headers::Lists)
}

fn same_len<T>(column: Vec<T>, n: usize, what: &str) -> PyResult<Vec<T>> {
    check_len(column.len(), n, what)?;
    Ok(column)
}

/// Fails unless a column of `len` entries has one per value (`n`).
fn check_len(len: usize, n: usize, what: &str) -> PyResult<()> {
    if len != n {
        return Err(errors::invalid(format!(
            "send_many: {what} has {len} entries for {n} values"
        )));
    }
    Ok(())
}

/// `obj` as an Arrow array when it is one (a chunked one combined).
fn arrow_of(obj: &Bound<'_, PyAny>) -> PyResult<Option<ArrayRef>> {
    if !(obj.hasattr("__arrow_c_array__")? || obj.hasattr("_export_to_c")?) {
        return Ok(None);
    }
    let mut obj = obj.clone();
    if obj.hasattr("combine_chunks")? {
        obj = obj.call_method0("combine_chunks")?;
    }
    Ok(Some(make_array(ArrayData::from_pyarrow_bound(&obj)?)))
}

/// A column given as an Arrow array (converted by `arrow`) or a list or iterable (each entry
/// converted by `one`, its row named in the error).
fn column<T>(
    obj: &Bound<'_, PyAny>,
    what: &str,
    arrow: fn(&dyn Array) -> PyResult<Vec<T>>,
) -> PyResult<Vec<T>>
where
    T: FromEntry,
{
    if let Some(array) = arrow_of(obj)? {
        return arrow(array.as_ref());
    }
    let entry = |(i, v): (usize, PyResult<Bound<'_, PyAny>>)| {
        T::from_entry(&v?).map_err(|e| at_row(e, what, i))
    };
    if let Ok(list) = obj.cast::<PyList>() {
        return list.iter().map(Ok).enumerate().map(entry).collect();
    }
    let items = obj.try_iter().map_err(|_| {
        errors::invalid(format!(
            "send_many: {what} must be a list, an iterable or an Arrow array, not {}",
            type_name(obj)
        ))
    })?;
    items.enumerate().map(entry).collect()
}

/// One entry of a Python list given to `send_many`.
trait FromEntry: Sized {
    fn from_entry(v: &Bound<'_, PyAny>) -> PyResult<Self>;
}

impl FromEntry for Bytes {
    fn from_entry(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        bytes_of(v, "a record value")
    }
}

impl FromEntry for Option<Bytes> {
    fn from_entry(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        optional_bytes(v, "a record key")
    }
}

impl FromEntry for Option<Vec<Header>> {
    fn from_entry(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        headers_of(v)
    }
}

impl FromEntry for Option<i64> {
    fn from_entry(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        timestamp_of(v)
    }
}

/// The error of one row of a list, naming it.
fn at_row(e: PyErr, what: &str, i: usize) -> PyErr {
    Python::attach(|py| errors::invalid(format!("send_many: {what}[{i}]: {}", e.value(py))))
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// `bytes`, `bytearray` or `str` (its UTF-8).
pub(crate) fn bytes_of(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Bytes> {
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Bytes::copy_from_slice(s.to_str()?.as_bytes()));
    }
    let b: Vec<u8> = v.extract().map_err(|_| {
        errors::invalid(format!(
            "{what} must be bytes, bytearray or str, not {}",
            type_name(v)
        ))
    })?;
    Ok(Bytes::from(b))
}

fn optional_bytes(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Bytes>> {
    if v.is_none() {
        return Ok(None);
    }
    bytes_of(v, what).map(Some)
}

/// `None`, a dict of name to value, or a list (or tuple) of `(name, value)` pairs.
fn headers_of(v: &Bound<'_, PyAny>) -> PyResult<Option<Vec<Header>>> {
    if v.is_none() {
        return Ok(None);
    }
    let pair = |name: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>| -> PyResult<Header> {
        let name = name.cast::<PyString>().map_err(|_| {
            errors::invalid(format!(
                "a header name must be str, not {}",
                type_name(name)
            ))
        })?;
        Ok(Header::new(
            name.to_str()?,
            optional_bytes(value, "a header value")?,
        ))
    };
    if let Ok(d) = v.cast::<PyDict>() {
        return d
            .iter()
            .map(|(k, v)| pair(&k, &v))
            .collect::<PyResult<_>>()
            .map(Some);
    }
    if v.is_instance_of::<PyString>() || v.is_instance_of::<PyBytes>() {
        return Err(errors::invalid(
            "headers must be a dict or a list of (name, value) pairs, not a string",
        ));
    }
    let items = v.try_iter().map_err(|_| {
        errors::invalid(format!(
            "headers must be a dict or a list of (name, value) pairs, not {}",
            type_name(v)
        ))
    })?;
    items
        .map(|item| {
            let item = item?;
            let t = item
                .cast::<PyTuple>()
                .ok()
                .filter(|t| t.len() == 2)
                .ok_or_else(|| {
                    let what = match item.cast::<PyTuple>() {
                        Ok(t) => format!("a tuple of {}", t.len()),
                        Err(_) => type_name(&item),
                    };
                    errors::invalid(format!("a header must be a (name, value) pair, not {what}"))
                })?;
            pair(&t.get_item(0)?, &t.get_item(1)?)
        })
        .collect::<PyResult<_>>()
        .map(Some)
}

/// `None`, `int` microseconds since the epoch UTC, or a timezone-aware `datetime`.
pub(crate) fn timestamp_of(v: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if v.is_none() {
        return Ok(None);
    }
    if v.is_instance_of::<PyBool>() {
        return Err(errors::invalid(
            "a timestamp must be an int or a datetime, not bool",
        ));
    }
    if v.is_instance_of::<PyInt>() {
        return v
            .extract::<i64>()
            .map(Some)
            .map_err(|_| errors::invalid("a timestamp in microseconds must fit in 64 bits"));
    }
    let py = v.py();
    let datetime = py.import("datetime")?;
    if v.is_instance(&datetime.getattr("datetime")?)? {
        if v.getattr("utcoffset")?.call0()?.is_none() {
            return Err(errors::invalid(
                "a naive datetime is ambiguous as a timestamp: give a timezone-aware one \
                 (datetime.now(timezone.utc)) or microseconds since the epoch",
            ));
        }
        let utc = datetime.getattr("timezone")?.getattr("utc")?;
        let epoch = datetime
            .getattr("datetime")?
            .call1((1970, 1, 1, 0, 0, 0, 0, utc))?;
        let delta = v.call_method1("__sub__", (epoch,))?;
        let days: i64 = delta.getattr("days")?.extract()?;
        let seconds: i64 = delta.getattr("seconds")?.extract()?;
        let micros: i64 = delta.getattr("microseconds")?.extract()?;
        return Ok(Some(days * 86_400_000_000 + seconds * 1_000_000 + micros));
    }
    Err(errors::invalid(format!(
        "a timestamp must be an int (microseconds since the epoch, UTC) or a timezone-aware \
         datetime, not {}",
        type_name(v)
    )))
}

/// A binary or string array's bytes (one copy of its data) and each row's range in them,
/// `None` for a null row.
struct Flat {
    data: Bytes,
    rows: Vec<Option<(usize, usize)>>,
    /// Whether the array was a string one (its rows UTF-8 already).
    utf8: bool,
}

impl Flat {
    fn get(&self, i: usize) -> Option<&[u8]> {
        self.rows[i].map(|(a, b)| &self.data[a..b])
    }

    /// The rows as `Bytes` sharing the one copy.
    fn into_rows(self) -> Vec<Option<Bytes>> {
        let data = self.data;
        self.rows
            .into_iter()
            .map(|r| r.map(|(a, b)| data.slice(a..b)))
            .collect()
    }
}

/// [`Flat`] of a binary or string array.
fn flat(array: &dyn Array, what: &str) -> PyResult<Flat> {
    macro_rules! rows {
        ($a:expr, $utf8:expr) => {{
            let a = $a;
            let o = a.value_offsets();
            let (base, end) = (o[0] as usize, o[o.len() - 1] as usize);
            Ok(Flat {
                data: Bytes::copy_from_slice(&a.value_data()[base..end]),
                rows: o
                    .windows(2)
                    .enumerate()
                    .map(|(i, w)| {
                        a.is_valid(i)
                            .then(|| (w[0] as usize - base, w[1] as usize - base))
                    })
                    .collect(),
                utf8: $utf8,
            })
        }};
    }
    let any = array.as_any();
    match array.data_type() {
        DataType::Binary => rows!(
            any.downcast_ref::<BinaryArray>()
                .unwrap_or_else(|| unreachable!()),
            false
        ),
        DataType::LargeBinary => {
            rows!(
                any.downcast_ref::<LargeBinaryArray>()
                    .unwrap_or_else(|| unreachable!()),
                false
            )
        }
        DataType::Utf8 => rows!(
            any.downcast_ref::<StringArray>()
                .unwrap_or_else(|| unreachable!()),
            true
        ),
        DataType::LargeUtf8 => {
            rows!(
                any.downcast_ref::<LargeStringArray>()
                    .unwrap_or_else(|| unreachable!()),
                true
            )
        }
        other => Err(errors::invalid(format!(
            "send_many: {what} must be a binary or string Arrow array, not {other}"
        ))),
    }
}

/// The rows of a binary or string array as `Bytes` (one copy of the array's data, shared by
/// the rows), `None` for nulls.
fn binary_rows(array: &dyn Array, what: &str) -> PyResult<Vec<Option<Bytes>>> {
    flat(array, what).map(Flat::into_rows)
}

fn values_in(array: &dyn Array) -> PyResult<Vec<Bytes>> {
    if array.null_count() > 0 {
        return Err(errors::invalid(format!(
            "send_many: the values hold {} nulls; a record value cannot be null",
            array.null_count()
        )));
    }
    Ok(binary_rows(array, "values")?
        .into_iter()
        .flatten()
        .collect())
}

fn keys_in(array: &dyn Array) -> PyResult<Vec<Option<Bytes>>> {
    binary_rows(array, "keys")
}

/// `list<struct<key: string, value: binary>>`: Spark's (and Kafka's) headers column, read in
/// place (names checked UTF-8, none null).
fn headers_in(array: &dyn Array) -> PyResult<ArrowHeaders> {
    let shape = || {
        errors::invalid(format!(
            "send_many: headers must be an Arrow list<struct<key: string, value: binary>>, not \
             {}",
            array.data_type()
        ))
    };
    let (offsets, entries): (Vec<usize>, &StructArray) = match array.data_type() {
        DataType::List(_) => {
            let l = array.as_list::<i32>();
            let o = l.value_offsets().iter().map(|&x| x as usize).collect();
            (o, l.values().as_struct_opt().ok_or_else(shape)?)
        }
        DataType::LargeList(_) => {
            let l = array.as_list::<i64>();
            let o = l.value_offsets().iter().map(|&x| x as usize).collect();
            (o, l.values().as_struct_opt().ok_or_else(shape)?)
        }
        _ => return Err(shape()),
    };
    let field = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| entries.column_by_name(n))
            .ok_or_else(shape)
    };
    let names = flat(field(&["key", "name"])?.as_ref(), "header names")?;
    let values = flat(field(&["value"])?.as_ref(), "header values")?;
    let mut rows = Vec::with_capacity(array.len());
    for (row, w) in offsets.windows(2).enumerate() {
        if array.is_null(row) {
            rows.push(None);
            continue;
        }
        for i in w[0]..w[1] {
            let ok = names
                .get(i)
                .is_some_and(|n| names.utf8 || is_header_name(n));
            if !ok {
                return Err(errors::invalid(format!(
                    "send_many: headers[{row}]: a header name must be a UTF-8 string, not null"
                )));
            }
        }
        rows.push(Some((w[0], w[1])));
    }
    Ok(ArrowHeaders {
        rows,
        names,
        values,
    })
}

/// A `timestamp` array of any unit (converted to microseconds), or `int64` microseconds.
fn timestamps_in(array: &dyn Array) -> PyResult<Vec<Option<i64>>> {
    fn rows<T: ArrowPrimitiveType<Native = i64>>(
        array: &dyn Array,
        to_micros: impl Fn(i64) -> Option<i64>,
    ) -> PyResult<Vec<Option<i64>>> {
        array
            .as_primitive::<T>()
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                None => Ok(None),
                Some(v) => to_micros(v).map(Some).ok_or_else(|| {
                    errors::invalid(format!(
                        "send_many: timestamps[{i}] is out of range in microseconds"
                    ))
                }),
            })
            .collect()
    }
    match array.data_type() {
        DataType::Int64 => rows::<Int64Type>(array, Some),
        DataType::Timestamp(TimeUnit::Second, _) => {
            rows::<TimestampSecondType>(array, |v| v.checked_mul(1_000_000))
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            rows::<TimestampMillisecondType>(array, |v| v.checked_mul(1_000))
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            rows::<TimestampMicrosecondType>(array, Some)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            rows::<TimestampNanosecondType>(array, |v| Some(v.div_euclid(1_000)))
        }
        other => Err(errors::invalid(format!(
            "send_many: timestamps must be an Arrow timestamp or int64 (microseconds) array, \
             not {other}"
        ))),
    }
}
