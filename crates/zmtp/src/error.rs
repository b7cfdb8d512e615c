//! The error type of the socket layer, split by who is at fault.

use std::io;

/// Everything a [`Socket`](crate::Socket) operation can fail with.
///
/// Variants are grouped by fault:
///
/// | fault            | variants |
/// |------------------|----------|
/// | caller misuse    | [`InvalidEndpoint`](Error::InvalidEndpoint), [`InvalidState`](Error::InvalidState), [`InvalidOption`](Error::InvalidOption), [`NotSupported`](Error::NotSupported), [`MessageTooLarge`](Error::MessageTooLarge), [`EmptyMessage`](Error::EmptyMessage), [`UnknownEndpoint`](Error::UnknownEndpoint), [`NoRuntime`](Error::NoRuntime) |
/// | routing          | [`HostUnreachable`](Error::HostUnreachable) |
/// | flow control     | [`WouldBlock`](Error::WouldBlock) |
/// | lifecycle        | [`Closed`](Error::Closed) |
/// | operating system | [`AddrInUse`](Error::AddrInUse), [`Io`](Error::Io) |
///
/// Errors caused by a misbehaving *peer* never surface here: they close that
/// one connection (logged with `tracing`) and the socket keeps serving the
/// others.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The endpoint string could not be parsed or names an unknown transport.
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint {
        /// The endpoint as given by the caller.
        endpoint: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The operation is not valid in the socket's current state (for example a
    /// second `send` on a REQ socket before the reply was received).
    #[error("operation not valid in the current state: {0}")]
    InvalidState(&'static str),
    /// The socket type does not support this operation (for example `recv` on
    /// PUSH or `subscribe` on REQ).
    #[error("{operation} is not supported by a {socket_type} socket")]
    NotSupported {
        /// Canonical name of the socket type (`"PUSH"`, ...).
        socket_type: &'static str,
        /// The operation that was attempted.
        operation: &'static str,
    },
    /// The message exceeds the configured size limits.
    #[error("message of {size} bytes exceeds the configured limit of {limit} bytes")]
    MessageTooLarge {
        /// Size of the rejected message (or frame) in bytes.
        size: u64,
        /// The limit it exceeded.
        limit: u64,
    },
    /// A socket option is invalid (for example a routing id over 255 bytes
    /// or a malformed property name).
    #[error("invalid socket option: {0}")]
    InvalidOption(String),
    /// A message with no frames was given; ZeroMQ messages have at least one
    /// frame (which may be empty).
    #[error("a message must have at least one frame")]
    EmptyMessage,
    /// `unbind` / `disconnect` of an endpoint that is not bound / connected.
    #[error("endpoint {0:?} is not bound or connected")]
    UnknownEndpoint(String),
    /// ROUTER with `router_mandatory`: no connected peer has this routing id.
    #[error("no peer with routing id {0:02x?}")]
    HostUnreachable(bytes::Bytes),
    /// The operation would block (HWM reached, or nothing to receive).
    #[error("operation would block")]
    WouldBlock,
    /// The socket has been closed.
    #[error("socket is closed")]
    Closed,
    /// [`Socket::new`](crate::Socket::new) was called outside a tokio
    /// runtime: the socket needs one to run its connections (call it from
    /// async code, or after `Runtime::enter`).
    #[error(
        "no tokio runtime: a socket must be created from within a tokio runtime (or with one entered)"
    )]
    NoRuntime,
    /// The address is already in use by another socket or process.
    #[error("address in use: {0}")]
    AddrInUse(String),
    /// Any other operating-system error.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
}

impl Error {
    pub(crate) fn endpoint(endpoint: &str, reason: &'static str) -> Self {
        Error::InvalidEndpoint {
            endpoint: endpoint.to_owned(),
            reason,
        }
    }

    /// Map a bind error, turning `EADDRINUSE` into [`Error::AddrInUse`].
    pub(crate) fn from_bind(endpoint: &str, err: io::Error) -> Self {
        if err.kind() == io::ErrorKind::AddrInUse {
            Error::AddrInUse(endpoint.to_owned())
        } else {
            Error::Io(err)
        }
    }
}

/// Why [`Socket::try_send_keeping`](crate::Socket::try_send_keeping) did not
/// queue a message.
///
/// Deliberately exhaustive: a message is either handed back or refused, and
/// callers match on both to keep the message.
#[derive(Debug)]
pub enum SendError {
    /// [`send`](crate::Socket::send) would wait (no peer has room): the
    /// message is handed back.
    Block(crate::Message),
    /// The message was refused; it is dropped.
    Fail(Error),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Block(_) => f.write_str("operation would block (message handed back)"),
            SendError::Fail(e) => write!(f, "message refused: {e}"),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Block(_) => None,
            SendError::Fail(e) => Some(e),
        }
    }
}

impl From<SendError> for Error {
    /// The message of a [`SendError::Block`] is dropped:
    /// [`Error::WouldBlock`].
    fn from(e: SendError) -> Self {
        match e {
            SendError::Block(_) => Error::WouldBlock,
            SendError::Fail(e) => e,
        }
    }
}

/// [`term`](crate::term) ran out of time: sockets closed in the background
/// were still flushing; they were terminated and their queued messages dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{abandoned} socket(s) still flushing when term timed out; their queued messages were dropped"
)]
#[non_exhaustive]
pub struct TermTimeout {
    /// How many sockets were terminated before they had flushed.
    pub abandoned: usize,
}

impl From<dafka_zmtp_proto::pattern::PatternError> for Error {
    fn from(e: dafka_zmtp_proto::pattern::PatternError) -> Self {
        use dafka_zmtp_proto::pattern::PatternError as P;
        match e {
            P::EmptyMessage => Error::EmptyMessage,
            P::Closed => Error::Closed,
            P::InvalidState(s) => Error::InvalidState(s),
            P::HostUnreachable(rid) => Error::HostUnreachable(rid),
            P::NotSupported {
                socket_type,
                operation,
            } => Error::NotSupported {
                socket_type: socket_type.as_str(),
                operation,
            },
            // `PatternError` is non-exhaustive: a refusal it adds is a state error until mapped.
            _ => Error::InvalidState("refused by the socket pattern"),
        }
    }
}

impl From<dafka_zmtp_proto::pattern::Refused<Error>> for SendError {
    fn from(r: dafka_zmtp_proto::pattern::Refused<Error>) -> Self {
        match r {
            dafka_zmtp_proto::pattern::Refused::Block(m) => SendError::Block(m),
            dafka_zmtp_proto::pattern::Refused::Fail(e) => SendError::Fail(e),
        }
    }
}
