//! `dafka._native`: the PyO3 extension module behind the `dafka` package.
//!
//! This crate converts and manages lifetimes only: Python values to and from
//! the core crates' types, one tokio runtime for the process ([`runtime`]),
//! and core errors to the Python exception hierarchy ([`errors`]). Protocol
//! logic lives in the core crates, which know nothing of Python.

use pyo3::prelude::*;

mod arrow_batch;
mod asyncio;
mod cluster_keys;
mod dafka;
mod dafka_admin;
mod dafka_async;
mod errors;
mod frame;
mod monitor;
mod poller;
mod runtime;
mod security;
mod zmtp;
mod zre;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Rust `log` records (and `tracing` events, through tracing's `log`
    // feature) go to Python's `logging`, under loggers named after the Rust
    // module path (`dafka_zmtp::...`). Levels are cached; see pyo3-log.
    if let Err(e) = pyo3_log::try_init() {
        // Another extension already installed a global logger; keep going.
        log::debug!("dafka: Python logging bridge not installed: {e}");
    }
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<zmtp::PySocket>()?;
    m.add_class::<frame::Frame>()?;
    m.add_class::<poller::Poller>()?;
    m.add_class::<monitor::PyMonitor>()?;
    m.add_class::<dafka::PyTower>()?;
    m.add_class::<dafka::PyStore>()?;
    m.add_class::<dafka::PyProducer>()?;
    m.add_class::<dafka::PyConsumer>()?;
    m.add_class::<dafka_admin::PyPartitionReader>()?;
    m.add_class::<zre::PyZreNode>()?;
    m.add_class::<cluster_keys::PyClusterKeys>()?;
    m.add_function(wrap_pyfunction!(zmtp::term, m)?)?;
    m.add_function(wrap_pyfunction!(security::curve_keypair, m)?)?;
    m.add_function(wrap_pyfunction!(security::curve_public, m)?)?;
    Ok(())
}
