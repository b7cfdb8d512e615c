//! The Arrow record batches the bindings build in Rust and hand to `pyarrow` through the
//! Arrow C data interface (no per-row Python work): ZeroMQ messages (`Socket.recv_batch`) and
//! Dafka records (`Consumer.poll`, `PartitionReader.poll`).
//!
//! Messages, chosen to be exactly what Spark's `frames array<binary>` expects
//! (every field nullable, list children named `element`):
//!
//! | column   | Arrow type                      | content                  |
//! |----------|---------------------------------|--------------------------|
//! | `frames` | `list<element: binary>`         | the message's frames     |
//!
//! Records (every field nullable; the first five in the order they always had, the others
//! after them):
//!
//! | column          | Arrow type                                  | content                                   |
//! |-----------------|---------------------------------------------|-------------------------------------------|
//! | `topic`         | `utf8`                                      | the topic                                 |
//! | `partition`     | `utf8`                                      | the producer's UUID, 32 upper-case hex    |
//! | `offset`        | `int64`                                     | offset within the partition               |
//! | `value`         | `binary`                                    | the record                                |
//! | `timestamp`     | `timestamp[us, tz=UTC]`                     | the record's own time: the producer's (the same for every reader), or when a store appended one that came without |
//! | `timestampType` | `int32`                                     | `0` create time, `1` log-append time (Kafka's numbers) |
//! | `key`           | `binary`                                    | the key; null when the record has none    |
//! | `headers`       | `list<element: struct<key: utf8, value: binary>>` | the headers; null when the record has none |

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, Int32Builder, Int64Builder, ListBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{
    ArrayRef, BinaryArray, ListArray, RecordBatch, StringArray, StructArray, new_null_array,
};
use arrow_buffer::{Buffer, NullBufferBuilder, OffsetBuffer};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use dafka_node::ConsumerRecord;
use dafka_zmtp::Message;
use pyo3::PyErr;

use crate::errors;

/// The schema of every batch `Socket.recv_batch` returns.
pub(crate) fn frames_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "frames",
        DataType::List(Arc::new(Field::new("element", DataType::Binary, true))),
        true,
    )]))
}

/// The Python error for a batch Arrow could not build.
pub(crate) fn batch_error(e: ArrowError) -> PyErr {
    errors::invalid(format!("cannot build the Arrow batch: {e}"))
}

/// The most value bytes one Arrow `binary` array holds (`i32` offsets).
const MAX_BATCH_BYTES: usize = i32::MAX as usize;

/// Messages collected for one batch, within a row count and Arrow's limit.
pub(crate) struct Pending {
    messages: Vec<Message>,
    max_messages: usize,
    max_bytes: usize,
    bytes: usize,
}

impl Pending {
    pub(crate) fn new(max_messages: usize) -> Self {
        Self::with_byte_limit(max_messages, MAX_BATCH_BYTES)
    }

    fn with_byte_limit(max_messages: usize, max_bytes: usize) -> Self {
        Pending {
            messages: Vec::new(),
            max_messages,
            max_bytes,
            bytes: 0,
        }
    }

    /// Add `msg`, or hand it back when the batch is full.
    pub(crate) fn push(&mut self, msg: Message) -> Result<(), Message> {
        let bytes = self.bytes.saturating_add(msg.byte_len());
        if self.messages.len() >= self.max_messages || bytes > self.max_bytes {
            return Err(msg);
        }
        self.bytes = bytes;
        self.messages.push(msg);
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    pub(crate) fn into_messages(self) -> Vec<Message> {
        self.messages
    }
}

/// One row per message. The caller keeps the total within
/// [`MAX_BATCH_BYTES`] (see [`Pending`]).
pub(crate) fn frames_batch(messages: &[Message]) -> Result<RecordBatch, ArrowError> {
    let frames: usize = messages.iter().map(Message::len).sum();
    let bytes: usize = messages.iter().map(Message::byte_len).sum();
    let mut builder =
        ListBuilder::with_capacity(BinaryBuilder::with_capacity(frames, bytes), messages.len())
            .with_field(Arc::new(Field::new("element", DataType::Binary, true)));
    for msg in messages {
        for frame in msg.frames() {
            builder.values().append_value(frame);
        }
        builder.append(true);
    }
    let column: ArrayRef = Arc::new(builder.finish());
    RecordBatch::try_new(frames_schema(), vec![column])
}

/// The schema of every batch `Consumer.poll` returns.
pub(crate) fn records_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("topic", DataType::Utf8, true),
        Field::new("partition", DataType::Utf8, true),
        Field::new("offset", DataType::Int64, true),
        Field::new("value", DataType::Binary, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("timestampType", DataType::Int32, true),
        Field::new("key", DataType::Binary, true),
        Field::new("headers", DataType::List(header_item()), true),
    ]))
}

/// The fields of one header: `key` (its name) and `value`, as Spark's Kafka source names them.
fn header_fields() -> Fields {
    Fields::from(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("value", DataType::Binary, true),
    ])
}

/// The item of the `headers` list.
fn header_item() -> Arc<Field> {
    Arc::new(Field::new(
        "element",
        DataType::Struct(header_fields()),
        true,
    ))
}

/// One row per record, in the order given; with `headers` false the `headers` column is
/// all nulls (a reader whose caller drops that column does not build it).
pub(crate) fn records_batch(
    records: &[ConsumerRecord],
    headers: bool,
) -> Result<RecordBatch, ArrowError> {
    let n = records.len();
    let bytes: usize = records.iter().map(|r| r.value.len()).sum();
    let mut topic = StringBuilder::with_capacity(n, n * 8);
    let mut partition = StringBuilder::with_capacity(n, n * 32);
    let mut offset = Int64Builder::with_capacity(n);
    let mut value = BinaryBuilder::with_capacity(n, bytes);
    let mut ts = TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
    let mut ts_type = Int32Builder::with_capacity(n);
    // Records come in runs of one partition: its topic and partition are converted to text
    // once per run, not per row (the hex encoding and UTF-8 check were a third of this).
    let mut names: Option<(&ConsumerRecord, String, String)> = None;
    for r in records {
        let same = names
            .as_ref()
            .is_some_and(|(last, _, _)| last.partition == r.partition && last.topic == r.topic);
        if !same {
            let t = String::from_utf8_lossy(r.topic.as_bytes()).into_owned();
            names = Some((r, t, r.partition.to_string()));
        }
        if let Some((_, t, p)) = &names {
            topic.append_value(t);
            partition.append_value(p);
        }
        offset.append_value(i64::try_from(r.offset).unwrap_or(i64::MAX));
        value.append_value(&r.value);
        ts.append_value(r.meta.timestamp);
        ts_type.append_value(r.meta.timestamp_type().code());
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(topic.finish()),
        Arc::new(partition.finish()),
        Arc::new(offset.finish()),
        Arc::new(value.finish()),
        Arc::new(ts.finish()),
        Arc::new(ts_type.finish()),
        key_column(records),
        if headers {
            headers_column(records)?
        } else {
            no_headers(records.len())
        },
    ];
    RecordBatch::try_new(records_schema(), columns)
}

/// The `key` column: all nulls at once when no record has a key (value-only records, the
/// common case, cost nothing per row here).
fn key_column(records: &[ConsumerRecord]) -> ArrayRef {
    if records.iter().all(|r| r.meta.key().is_none()) {
        return new_null_array(&DataType::Binary, records.len());
    }
    let bytes = records
        .iter()
        .filter_map(|r| r.meta.key())
        .map(<[u8]>::len)
        .sum();
    let mut key = BinaryBuilder::with_capacity(records.len(), bytes);
    for r in records {
        key.append_option(r.meta.key());
    }
    Arc::new(key.finish())
}

/// A `headers` column of `n` nulls.
fn no_headers(n: usize) -> ArrayRef {
    new_null_array(&DataType::List(header_item()), n)
}

/// An `i32` Arrow offset, or the error Arrow gives a column over 2 GiB.
fn offset_of(len: usize) -> Result<i32, ArrowError> {
    i32::try_from(len).map_err(|_| ArrowError::ComputeError("headers column over 2 GiB".into()))
}

/// The `headers` column: all nulls at once when no record has headers. Built straight from
/// each record's encoded extras into the column's buffers (the names checked as UTF-8 once,
/// over the whole names buffer, not one by one).
fn headers_column(records: &[ConsumerRecord]) -> Result<ArrayRef, ArrowError> {
    if records.iter().all(|r| r.meta.header_count().is_none()) {
        return Ok(no_headers(records.len()));
    }
    let count: usize = records.iter().filter_map(|r| r.meta.header_count()).sum();
    let mut lists = Vec::with_capacity(records.len() + 1);
    let mut present = NullBufferBuilder::new(records.len());
    let mut name_offsets = Vec::with_capacity(count + 1);
    let mut names = Vec::new();
    let mut value_offsets = Vec::with_capacity(count + 1);
    let mut values = Vec::new();
    let mut value_present = NullBufferBuilder::new(count);
    lists.push(0i32);
    name_offsets.push(0i32);
    value_offsets.push(0i32);
    let mut entries = 0;
    for r in records {
        match r.meta.headers() {
            Some(hs) => {
                for h in hs {
                    names.extend_from_slice(h.name);
                    name_offsets.push(offset_of(names.len())?);
                    value_present.append(h.value.is_some());
                    values.extend_from_slice(h.value.unwrap_or_default());
                    value_offsets.push(offset_of(values.len())?);
                    entries += 1;
                }
                present.append_non_null();
            }
            None => present.append_null(),
        }
        lists.push(offset_of(entries)?);
    }
    let names = StringArray::try_new(
        OffsetBuffer::new(name_offsets.into()),
        Buffer::from_vec(names),
        None,
    )?;
    let values = BinaryArray::try_new(
        OffsetBuffer::new(value_offsets.into()),
        Buffer::from_vec(values),
        value_present.finish(),
    )?;
    let entries = StructArray::try_new(
        header_fields(),
        vec![Arc::new(names), Arc::new(values)],
        None,
    )?;
    Ok(Arc::new(ListArray::try_new(
        header_item(),
        OffsetBuffer::new(lists.into()),
        Arc::new(entries),
        present.finish(),
    )?))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn msg(frames: &[&'static [u8]]) -> Message {
        frames.iter().map(|f| Bytes::from_static(f)).collect()
    }

    #[test]
    fn pending_stops_at_the_row_count_and_the_byte_limit() {
        let mut p = Pending::with_byte_limit(3, 10);
        assert!(p.push(msg(&[b"abcd"])).is_ok());
        assert!(p.push(msg(&[b"ef", b"gh"])).is_ok());
        let refused = p.push(msg(&[b"ijk"])).unwrap_err();
        assert_eq!(refused.byte_len(), 3, "over 10 bytes: handed back whole");
        assert!(p.push(msg(&[b"ij"])).is_ok());
        assert!(p.push(msg(&[])).is_err(), "a fourth row is over the count");
        assert_eq!(p.into_messages().len(), 3);
    }

    #[test]
    fn batch_has_one_row_per_message_with_its_frames() {
        let batch = frames_batch(&[msg(&[b"a", b""]), msg(&[b"bc"])]).unwrap();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(batch.schema(), frames_schema());
        let list = batch
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::ListArray>()
            .unwrap();
        let first = list.value(0);
        let first = first
            .as_any()
            .downcast_ref::<arrow_array::BinaryArray>()
            .unwrap();
        assert_eq!((first.value(0), first.value(1)), (&b"a"[..], &b""[..]));
        assert_eq!(list.value_length(1), 1);
    }
}
