//! Core errors to the Python exception hierarchy of `python/dafka/errors.py`.
//!
//! The classes are defined in Python (so they can also derive from the
//! matching built-in: `ValueError`, `TimeoutError`, `OSError`, ...) and
//! imported here lazily by `pyo3::import_exception!`.

use pyo3::PyErr;

pyo3::import_exception!(dafka.errors, DafkaError);
pyo3::import_exception!(dafka.errors, InvalidArgumentError);
pyo3::import_exception!(dafka.errors, StateError);
pyo3::import_exception!(dafka.errors, TimeoutError);
pyo3::import_exception!(dafka.errors, WouldBlockError);
pyo3::import_exception!(dafka.errors, ClosedError);
pyo3::import_exception!(dafka.errors, HostUnreachableError);
pyo3::import_exception!(dafka.errors, TransportError);

/// Map a socket-layer error to its Python exception. OS errors carry their
/// `errno`, so `except OSError as e: e.errno` works as with the stdlib.
pub(crate) fn zmtp(err: dafka_zmtp::Error) -> PyErr {
    use dafka_zmtp::Error as E;
    let msg = err.to_string();
    match err {
        E::InvalidEndpoint { .. }
        | E::InvalidOption(_)
        | E::UnknownEndpoint(_)
        | E::MessageTooLarge { .. }
        | E::EmptyMessage => InvalidArgumentError::new_err(msg),
        E::InvalidState(_) | E::NotSupported { .. } => StateError::new_err(msg),
        E::HostUnreachable(_) => HostUnreachableError::new_err(msg),
        E::WouldBlock => WouldBlockError::new_err(msg),
        E::Closed => ClosedError::new_err(msg),
        E::AddrInUse(_) => TransportError::new_err((libc::EADDRINUSE, msg)),
        E::Io(io) => os(&io, msg),
        _ => DafkaError::new_err(msg),
    }
}

/// An OS error as `TransportError`, with its `errno` when there is one.
fn os(io: &std::io::Error, msg: String) -> PyErr {
    match io.raw_os_error() {
        Some(code) => TransportError::new_err((code, msg)),
        None => TransportError::new_err(msg),
    }
}

/// A caller-supplied value Python-side was wrong.
pub(crate) fn invalid(msg: impl Into<String>) -> PyErr {
    InvalidArgumentError::new_err(msg.into())
}

/// The call is not allowed in the object's current state.
pub(crate) fn state(msg: impl Into<String>) -> PyErr {
    StateError::new_err(msg.into())
}

/// A blocking call ran out of time.
pub(crate) fn timeout(msg: impl Into<String>) -> PyErr {
    TimeoutError::new_err(msg.into())
}

pyo3::import_exception!(dafka.errors, StorageError);

/// The object was closed.
pub(crate) fn closed(msg: impl Into<String>) -> PyErr {
    ClosedError::new_err(msg.into())
}

/// Map a Dafka node error to its Python exception.
pub(crate) fn node(err: dafka_node::Error) -> PyErr {
    use dafka_node::Error as E;
    let msg = err.to_string();
    match err {
        E::Caller(_) | E::Topic(_) | E::GroupName(_) | E::Endpoint { .. } => {
            InvalidArgumentError::new_err(msg)
        }
        E::SendTimeout { .. }
        | E::FlushTimeout { .. }
        | E::ResumeTimeout { .. }
        | E::NoTower { .. }
        | E::NoStore { .. } => TimeoutError::new_err(msg),
        E::Refused(_) | E::NotAssigned { .. } => StateError::new_err(msg),
        E::Closed => ClosedError::new_err(msg),
        E::Storage(_) | E::StoreRefused { .. } | E::Offsets(_) => StorageError::new_err(msg),
        E::Socket(e) => zmtp(e),
        E::Zre(e) => zre(e),
        _ => DafkaError::new_err(msg),
    }
}

/// Map a ZRE node error to its Python exception.
pub(crate) fn zre(err: dafka_zre::Error) -> PyErr {
    use dafka_zre::{CallerError as C, Error as E};
    let msg = err.to_string();
    match err {
        E::Caller(C::UnknownPeer(_)) => HostUnreachableError::new_err(msg),
        E::Caller(C::State(_)) => StateError::new_err(msg),
        E::Caller(_) => InvalidArgumentError::new_err(msg),
        E::Stopped => ClosedError::new_err(msg),
        E::Zmtp(e) => zmtp(e),
        E::Io(io) => os(&io, msg),
        _ => DafkaError::new_err(msg),
    }
}
