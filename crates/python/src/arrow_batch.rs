//! ZeroMQ messages to Arrow record batches, built in Rust and handed to
//! `pyarrow` through the Arrow C data interface (no per-row Python work).
//!
//! Schema, chosen to be exactly what Spark's `frames array<binary>` expects
//! (every field nullable, list children named `element`):
//!
//! | column   | Arrow type                      | content                  |
//! |----------|---------------------------------|--------------------------|
//! | `frames` | `list<element: binary>`         | the message's frames     |

use std::sync::Arc;

use arrow_array::builder::{BinaryBuilder, ListBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use dafka_zmtp::Message;

/// The schema of every batch `Socket.recv_batch` returns.
pub(crate) fn frames_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "frames",
        DataType::List(Arc::new(Field::new("element", DataType::Binary, true))),
        true,
    )]))
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
