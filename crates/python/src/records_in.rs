//! Records a caller hands `Producer.send` and `Producer.send_many`, converted to
//! [`ProducerRecord`]s before anything is sent: a bad value, key, header or timestamp raises
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
use dafka_node::{Header, ProducerRecord};
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
) -> PyResult<Vec<ProducerRecord>> {
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
        .map(|h| same_len(column(h, "headers", headers_in)?, n, "headers"))
        .transpose()?;
    let timestamps = timestamps
        .map(|t| same_len(column(t, "timestamps", timestamps_in)?, n, "timestamps"))
        .transpose()?;
    Ok(assemble(values, keys, headers, timestamps))
}

/// The columns of a `RecordBatch` or `Table`: `value` (required), `key`, `headers`,
/// `timestamp`; other columns (as Spark's `topic`, `partition`, ...) are ignored.
fn table_records(table: &Bound<'_, PyAny>) -> PyResult<Vec<ProducerRecord>> {
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
        .map(|a| headers_in(a.as_ref()))
        .transpose()?;
    let timestamps = get("timestamp")?
        .map(|a| timestamps_in(a.as_ref()))
        .transpose()?;
    Ok(assemble(values, keys, headers, timestamps))
}

fn assemble(
    values: Vec<Bytes>,
    keys: Option<Vec<Option<Bytes>>>,
    headers: Option<Vec<Option<Vec<Header>>>>,
    timestamps: Option<Vec<Option<i64>>>,
) -> Vec<ProducerRecord> {
    let mut keys = keys.map(Vec::into_iter);
    let mut headers = headers.map(Vec::into_iter);
    let mut timestamps = timestamps.map(Vec::into_iter);
    values
        .into_iter()
        .map(|value| ProducerRecord {
            value,
            key: keys.as_mut().and_then(Iterator::next).flatten(),
            headers: headers.as_mut().and_then(Iterator::next).flatten(),
            timestamp: timestamps.as_mut().and_then(Iterator::next).flatten(),
        })
        .collect()
}

fn same_len<T>(column: Vec<T>, n: usize, what: &str) -> PyResult<Vec<T>> {
    if column.len() != n {
        return Err(errors::invalid(format!(
            "send_many: {what} has {} entries for {n} values",
            column.len()
        )));
    }
    Ok(column)
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
    if obj.hasattr("__arrow_c_array__")? || obj.hasattr("_export_to_c")? {
        let mut obj = obj.clone();
        if obj.hasattr("combine_chunks")? {
            obj = obj.call_method0("combine_chunks")?;
        }
        let data = ArrayData::from_pyarrow_bound(&obj)?;
        return arrow(make_array(data).as_ref());
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

/// The rows of a binary or string array as `Bytes` (one copy of the array's data, shared by
/// the rows), `None` for nulls.
fn binary_rows(array: &dyn Array, what: &str) -> PyResult<Vec<Option<Bytes>>> {
    macro_rules! rows {
        ($a:expr) => {{
            let a = $a;
            let o = a.value_offsets();
            let (base, end) = (o[0] as usize, o[o.len() - 1] as usize);
            let all = Bytes::copy_from_slice(&a.value_data()[base..end]);
            Ok(o.windows(2)
                .enumerate()
                .map(|(i, w)| {
                    a.is_valid(i)
                        .then(|| all.slice(w[0] as usize - base..w[1] as usize - base))
                })
                .collect())
        }};
    }
    let any = array.as_any();
    match array.data_type() {
        DataType::Binary => rows!(
            any.downcast_ref::<BinaryArray>()
                .unwrap_or_else(|| unreachable!())
        ),
        DataType::LargeBinary => {
            rows!(
                any.downcast_ref::<LargeBinaryArray>()
                    .unwrap_or_else(|| unreachable!())
            )
        }
        DataType::Utf8 => rows!(
            any.downcast_ref::<StringArray>()
                .unwrap_or_else(|| unreachable!())
        ),
        DataType::LargeUtf8 => {
            rows!(
                any.downcast_ref::<LargeStringArray>()
                    .unwrap_or_else(|| unreachable!())
            )
        }
        other => Err(errors::invalid(format!(
            "send_many: {what} must be a binary or string Arrow array, not {other}"
        ))),
    }
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

/// `list<struct<key: string, value: binary>>`: Spark's (and Kafka's) headers column.
fn headers_in(array: &dyn Array) -> PyResult<Vec<Option<Vec<Header>>>> {
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
    let names = binary_rows(field(&["key", "name"])?.as_ref(), "header names")?;
    let values = binary_rows(field(&["value"])?.as_ref(), "header values")?;
    let mut rows = Vec::with_capacity(array.len());
    for (row, w) in offsets.windows(2).enumerate() {
        if array.is_null(row) {
            rows.push(None);
            continue;
        }
        let mut headers = Vec::with_capacity(w[1] - w[0]);
        for i in w[0]..w[1] {
            let Some(name) = names[i].clone().filter(|n| std::str::from_utf8(n).is_ok()) else {
                return Err(errors::invalid(format!(
                    "send_many: headers[{row}]: a header name must be a UTF-8 string, not null"
                )));
            };
            headers.push(Header {
                name,
                value: values[i].clone(),
            });
        }
        rows.push(Some(headers));
    }
    Ok(rows)
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
