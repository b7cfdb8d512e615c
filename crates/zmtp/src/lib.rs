//! ZeroMQ sockets on tokio, speaking ZMTP 3.1 through `dafka-zmtp-proto`.
#![forbid(unsafe_code)]
