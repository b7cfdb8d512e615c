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

/// One row per message.
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
