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
use dafka_node::{ConsumerRecord, NodeId, RecordMeta, Topic};
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
///
/// One pass over the records builds every column and drops each record: a batch is up to
/// 100,000 records received a while ago, out of the nearest caches, and a record's value and
/// extras (key and headers) are each read once, in the same step (passes of their own, and
/// the drop of the list afterwards, missed the cache on every row).
pub(crate) fn records_batch(
    records: Vec<ConsumerRecord>,
    headers: bool,
) -> Result<RecordBatch, ArrowError> {
    let n = records.len();
    // Room for values the size of the first (records of a batch are mostly alike); the
    // buffer grows if they are larger.
    let bytes = records.first().map_or(0, |r| r.value.len()) * n;
    let mut topic = StringBuilder::with_capacity(n, n * 8);
    let mut partition = StringBuilder::with_capacity(n, n * 32);
    let mut offset = Int64Builder::with_capacity(n);
    let mut value = BinaryBuilder::with_capacity(n, bytes);
    let mut ts = TimestampMicrosecondBuilder::with_capacity(n).with_timezone("UTC");
    let mut ts_type = Int32Builder::with_capacity(n);
    let mut extras = ExtrasColumns::new(n, headers);
    // Records come in runs of one partition: its topic and partition are converted to text
    // once per run, not per row (the hex encoding and UTF-8 check were a third of this).
    let mut names: Option<(Topic, NodeId, String, String)> = None;
    for (row, r) in records.into_iter().enumerate() {
        let same = names
            .as_ref()
            .is_some_and(|(t, p, _, _)| *p == r.partition && *t == r.topic);
        if !same {
            let t = String::from_utf8_lossy(r.topic.as_bytes()).into_owned();
            let p = r.partition.to_string();
            names = Some((r.topic.clone(), r.partition, t, p));
        }
        if let Some((_, _, t, p)) = &names {
            topic.append_value(t);
            partition.append_value(p);
        }
        offset.append_value(i64::try_from(r.offset).unwrap_or(i64::MAX));
        value.append_value(&r.value);
        ts.append_value(r.meta.timestamp);
        ts_type.append_value(r.meta.timestamp_type().code());
        extras.push(row, &r.meta)?;
    }
    let (key, headers) = extras.finish(n)?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(topic.finish()),
        Arc::new(partition.finish()),
        Arc::new(offset.finish()),
        Arc::new(value.finish()),
        Arc::new(ts.finish()),
        Arc::new(ts_type.finish()),
        key,
        headers,
    ];
    RecordBatch::try_new(records_schema(), columns)
}

/// A `headers` column of `n` nulls.
fn no_headers(n: usize) -> ArrayRef {
    new_null_array(&DataType::List(header_item()), n)
}

/// An `i32` Arrow offset, or the error Arrow gives a column over 2 GiB.
#[inline]
fn offset_of(len: usize) -> Result<i32, ArrowError> {
    i32::try_from(len).map_err(|_| ArrowError::ComputeError("column over 2 GiB".into()))
}

/// The `key` and `headers` columns, built row by row from each record's encoded extras
/// straight into the columns' buffers. Nothing is allocated until a record with extras comes
/// (the rows before it are then filled in as nulls at once): value-only records, the common
/// case, cost a branch each, and their columns are made all null at the end.
struct ExtrasColumns {
    /// The batch's rows.
    rows: usize,
    /// Whether the `headers` column is wanted.
    headers: bool,
    /// Set at the first record with extras: the buffers below are in use from then on.
    started: bool,
    any_key: bool,
    any_headers: bool,
    key_offsets: Vec<i32>,
    keys: Vec<u8>,
    key_present: NullBufferBuilder,
    lists: Vec<i32>,
    present: NullBufferBuilder,
    name_offsets: Vec<i32>,
    names: Vec<u8>,
    value_offsets: Vec<i32>,
    values: Vec<u8>,
    value_present: NullBufferBuilder,
}

impl ExtrasColumns {
    fn new(rows: usize, headers: bool) -> Self {
        ExtrasColumns {
            rows,
            headers,
            started: false,
            any_key: false,
            any_headers: false,
            key_offsets: Vec::new(),
            keys: Vec::new(),
            key_present: NullBufferBuilder::new(rows),
            lists: Vec::new(),
            present: NullBufferBuilder::new(rows),
            name_offsets: Vec::new(),
            names: Vec::new(),
            value_offsets: Vec::new(),
            values: Vec::new(),
            value_present: NullBufferBuilder::new(0),
        }
    }

    /// Row `row`'s key and headers.
    #[inline]
    fn push(&mut self, row: usize, meta: &RecordMeta) -> Result<(), ArrowError> {
        if !self.started {
            if !meta.has_extras() {
                return Ok(());
            }
            self.start(row, meta);
        }
        match meta.key() {
            Some(k) => {
                self.any_key = true;
                self.keys.extend_from_slice(k);
                self.key_present.append_non_null();
            }
            None => self.key_present.append_null(),
        }
        self.key_offsets.push(offset_of(self.keys.len())?);
        if !self.headers {
            return Ok(());
        }
        match meta.headers() {
            Some(hs) => {
                self.any_headers = true;
                for h in hs {
                    self.names.extend_from_slice(h.name);
                    self.name_offsets.push(offset_of(self.names.len())?);
                    match h.value {
                        Some(v) => {
                            self.values.extend_from_slice(v);
                            self.value_present.append_non_null();
                        }
                        None => self.value_present.append_null(),
                    }
                    self.value_offsets.push(offset_of(self.values.len())?);
                }
                self.present.append_non_null();
            }
            None => self.present.append_null(),
        }
        self.lists.push(offset_of(self.name_offsets.len() - 1)?);
        Ok(())
    }

    /// The first record with extras is row `row`: the rows before it get null keys and
    /// headers, and the buffers room for the rest of the batch, sized on this record.
    #[cold]
    fn start(&mut self, row: usize, meta: &RecordMeta) {
        self.started = true;
        let rows = self.rows.max(row + 1);
        let left = rows - row;
        self.key_offsets = Vec::with_capacity(rows + 1);
        self.key_offsets.resize(row + 1, 0);
        self.key_present.append_n_nulls(row);
        self.keys = Vec::with_capacity(left * meta.key().map_or(0, <[u8]>::len));
        if self.headers {
            let (count, names, values) = meta.headers().map_or((0, 0, 0), |hs| {
                hs.fold((0, 0, 0), |(c, n, v), h| {
                    (c + 1, n + h.name.len(), v + h.value.map_or(0, <[u8]>::len))
                })
            });
            self.lists = Vec::with_capacity(rows + 1);
            self.lists.resize(row + 1, 0);
            self.present.append_n_nulls(row);
            self.name_offsets = Vec::with_capacity(left * count + 1);
            self.name_offsets.push(0);
            self.value_offsets = Vec::with_capacity(left * count + 1);
            self.value_offsets.push(0);
            self.value_present = NullBufferBuilder::new(left * count);
            self.names = Vec::with_capacity(left * names);
            self.values = Vec::with_capacity(left * values);
        }
    }

    /// The `key` and `headers` columns of `rows` rows.
    fn finish(mut self, rows: usize) -> Result<(ArrayRef, ArrayRef), ArrowError> {
        let key: ArrayRef = if self.any_key {
            Arc::new(BinaryArray::try_new(
                OffsetBuffer::new(self.key_offsets.into()),
                Buffer::from_vec(self.keys),
                self.key_present.finish(),
            )?)
        } else {
            new_null_array(&DataType::Binary, rows)
        };
        if !self.any_headers {
            return Ok((key, no_headers(rows)));
        }
        let names = StringArray::try_new(
            OffsetBuffer::new(self.name_offsets.into()),
            Buffer::from_vec(self.names),
            None,
        )?;
        let values = BinaryArray::try_new(
            OffsetBuffer::new(self.value_offsets.into()),
            Buffer::from_vec(self.values),
            self.value_present.finish(),
        )?;
        let entries = StructArray::try_new(
            header_fields(),
            vec![Arc::new(names), Arc::new(values)],
            None,
        )?;
        let headers = ListArray::try_new(
            header_item(),
            OffsetBuffer::new(self.lists.into()),
            Arc::new(entries),
            self.present.finish(),
        )?;
        Ok((key, Arc::new(headers)))
    }
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

    fn record(offset: u64, value: &'static [u8], meta: RecordMeta) -> ConsumerRecord {
        ConsumerRecord {
            topic: Topic::try_from("t").unwrap(),
            partition: NodeId::from_bytes([7; 16]),
            offset,
            value: Bytes::from_static(value),
            meta,
        }
    }

    /// Rows with and without extras in one batch, the first keyed row after value-only ones:
    /// the rows before it are null in both columns, a null header value stays null, and an
    /// empty key and an empty list are not nulls.
    #[test]
    fn keys_and_headers_of_a_mixed_batch_land_on_their_rows() {
        use arrow_array::Array as _;
        use dafka_node::{Header, TimestampType};
        let keyed = |key: Option<&[u8]>, headers: Option<&[Header]>| {
            RecordMeta::new(5, TimestampType::CreateTime, key, headers)
        };
        let hs = [
            Header::new("trace", Some(Bytes::from_static(b"t-1"))),
            Header::new("null", None),
        ];
        let records = vec![
            record(0, b"a", RecordMeta::created(1)),
            record(1, b"b", RecordMeta::created(2)),
            record(2, b"c", keyed(Some(b"k"), Some(&hs))),
            record(3, b"d", RecordMeta::created(3)),
            record(4, b"e", keyed(Some(b""), Some(&[]))),
            record(5, b"f", keyed(None, Some(&hs[1..]))),
        ];
        let batch = records_batch(records.clone(), true).unwrap();
        assert_eq!(batch.num_rows(), 6);
        let key = batch
            .column(6)
            .as_any()
            .downcast_ref::<BinaryArray>()
            .unwrap();
        let keys: Vec<_> = (0..6)
            .map(|i| key.is_valid(i).then(|| key.value(i)))
            .collect();
        assert_eq!(keys, [None, None, Some(&b"k"[..]), None, Some(b""), None]);
        let list = batch
            .column(7)
            .as_any()
            .downcast_ref::<ListArray>()
            .unwrap();
        type Row = Option<Vec<(String, Option<Vec<u8>>)>>;
        let rows: Vec<Row> = (0..6)
            .map(|i| {
                list.is_valid(i).then(|| {
                    let entries = list.value(i);
                    let entries = entries.as_any().downcast_ref::<StructArray>().unwrap();
                    let names = entries.column(0).as_any().downcast_ref::<StringArray>();
                    let values = entries.column(1).as_any().downcast_ref::<BinaryArray>();
                    let (names, values) = (names.unwrap(), values.unwrap());
                    (0..entries.len())
                        .map(|j| {
                            let v = values.is_valid(j).then(|| values.value(j).to_vec());
                            (names.value(j).to_owned(), v)
                        })
                        .collect()
                })
            })
            .collect();
        let trace = ("trace".to_owned(), Some(b"t-1".to_vec()));
        let null = ("null".to_owned(), None);
        assert_eq!(
            rows,
            [
                None,
                None,
                Some(vec![trace, null.clone()]),
                None,
                Some(vec![]),
                Some(vec![null]),
            ]
        );
        let without = records_batch(records, false).unwrap();
        assert_eq!(without.column(7).null_count(), 6, "headers not asked for");
        assert_eq!(without.column(6).as_ref(), batch.column(6).as_ref());
        let plain = records_batch(vec![record(0, b"a", RecordMeta::created(1))], true).unwrap();
        assert_eq!(plain.column(6).null_count(), 1);
        assert_eq!(plain.column(7).null_count(), 1);
    }
}
