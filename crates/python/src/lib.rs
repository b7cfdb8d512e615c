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
mod records_in;
mod runtime;
mod security;
mod zmtp;
mod zre;

/// pyo3-log's logger, entered through [`runtime::attach`]: a record logged by a runtime
/// thread while the interpreter finalizes (nodes never closed are dropped then, and log their
/// shutdown) is dropped instead of panicking in pyo3.
struct ToPython(pyo3_log::Logger);

impl log::Log for ToPython {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        // pyo3-log attaches again inside: that nests (the thread is attached already).
        let _ = runtime::attach(|_| self.0.log(record));
    }

    fn flush(&self) {
        self.0.flush();
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // Rust `log` records (and `tracing` events, through tracing's `log`
    // feature) go to Python's `logging`, under loggers named after the Rust
    // module path (`dafka_zmtp::...`). Levels are cached; see pyo3-log.
    // (pyo3-log's default: Python's own levels filter further.)
    let level = log::LevelFilter::Debug;
    let logger = pyo3_log::Logger::new(m.py(), pyo3_log::Caching::LoggersAndLevels)?.filter(level);
    match log::set_boxed_logger(Box::new(ToPython(logger))) {
        Ok(()) => log::set_max_level(level),
        // Another extension already installed a global logger; keep going.
        Err(e) => log::debug!("dafka: Python logging bridge not installed: {e}"),
    }
    // Runs before the interpreter finalizes (atexit handlers run last-registered first, so
    // after those of the modules imported later, such as `dafka.zmtp`'s flush).
    m.py()
        .import("atexit")?
        .call_method1("register", (wrap_pyfunction!(runtime::python_exiting, m)?,))?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("OPTION_NUMBERS", zmtp::option_numbers(m.py())?)?;
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
    m.add_function(wrap_pyfunction!(dafka_admin::group_assignment, m)?)?;
    m.add_function(wrap_pyfunction!(security::curve_keypair, m)?)?;
    m.add_function(wrap_pyfunction!(security::curve_public, m)?)?;
    Ok(())
}
