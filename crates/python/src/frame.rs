//! Frames between Python objects and [`Bytes`], copied only where needed.
//!
//! Sending: a `bytes` object is immutable, so a large one is handed to the
//! socket as it is (the [`Bytes`] keeps a reference to it, as pyzmq does above
//! its copy threshold); a read-only buffer likewise. A writable buffer
//! (`bytearray`, a writable `memoryview`) is copied unless the caller passes
//! `copy=False`, promising not to change it until it is sent, as in pyzmq.
//!
//! Receiving: `copy=True` gives `bytes` (a large frame is copied with the GIL
//! released); `copy=False` gives a [`Frame`], which exposes the received
//! memory through the buffer protocol without copying it.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyByteArray, PyBytes, PyString};

/// Frames at least this long are shared with their Python object instead of
/// copied (below it a copy is cheaper than keeping the reference), and copied
/// into `bytes` with the GIL released on receipt.
pub(crate) const COPY_THRESHOLD: usize = 16 * 1024;

/// Python objects released by the I/O threads without the GIL and not yet
/// decremented (PyO3 defers those to the next time a thread attaches).
static DEFERRED_RELEASES: AtomicUsize = AtomicUsize::new(0);

/// Above this many deferred releases, a sending thread detaches once so that
/// PyO3 applies them: a sender that never blocks would otherwise keep every
/// sent `bytes` alive.
const DEFERRED_RELEASES_MAX: usize = 64;

/// A `bytes` object (or a read-only buffer) a [`Bytes`] borrows from.
struct Shared<T: AsRef<[u8]>>(T);

impl<T: AsRef<[u8]>> AsRef<[u8]> for Shared<T> {
    fn as_ref(&self) -> &[u8] {
        self.0.as_ref()
    }
}

impl<T: AsRef<[u8]>> Drop for Shared<T> {
    fn drop(&mut self) {
        DEFERRED_RELEASES.fetch_add(1, Ordering::Relaxed);
    }
}

/// A buffer export held while the socket owns its memory.
struct Exported(PyUntypedBuffer);

impl AsRef<[u8]> for Exported {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: checked C-contiguous when taken; the export pins the memory
        // (a bytearray cannot be resized while exported) until it is released.
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr().cast::<u8>(), self.0.len_bytes()) }
    }
}

/// Apply the releases the I/O threads deferred, if many piled up.
pub(crate) fn settle_releases(py: Python<'_>) {
    if DEFERRED_RELEASES.load(Ordering::Relaxed) > DEFERRED_RELEASES_MAX {
        DEFERRED_RELEASES.store(0, Ordering::Relaxed);
        // Re-attaching runs PyO3's deferred decrements.
        py.detach(|| ());
    }
}

/// One frame from a Python object: `bytes`, `Frame`, or any object with the
/// buffer protocol (`bytearray`, `memoryview`, `array`, numpy arrays, ...).
pub(crate) fn to_bytes(obj: &Bound<'_, PyAny>, copy: bool) -> PyResult<Bytes> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        let data = b.as_bytes();
        if data.len() < COPY_THRESHOLD {
            return Ok(Bytes::copy_from_slice(data));
        }
        return Ok(Bytes::from_owner(Shared(PyBackedBytes::from(b.clone()))));
    }
    if let Ok(f) = obj.cast::<Frame>() {
        return Ok(f.get().data.clone());
    }
    if let Ok(b) = obj.cast::<PyByteArray>()
        && (copy || b.len() < COPY_THRESHOLD)
    {
        return Ok(Bytes::from(b.to_vec()));
    }
    if obj.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(
            "frames must be bytes, not str (encode it first)",
        ));
    }
    let buffer = PyUntypedBuffer::get(obj).map_err(|_| {
        PyTypeError::new_err(format!(
            "a frame must be bytes or support the buffer protocol, not {}",
            obj.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    if !buffer.is_c_contiguous() {
        // Rare (a strided view): let Python lay it out.
        let flat = obj.call_method0(pyo3::intern!(obj.py(), "tobytes"))?;
        return Ok(Bytes::copy_from_slice(flat.cast::<PyBytes>()?.as_bytes()));
    }
    let len = buffer.len_bytes();
    if len < COPY_THRESHOLD || (copy && !buffer.readonly()) {
        let exported = Exported(buffer);
        return Ok(Bytes::copy_from_slice(exported.as_ref()));
    }
    Ok(Bytes::from_owner(Shared(Exported(buffer))))
}

/// A received frame as `bytes`. Large frames are copied with the GIL
/// released (the new object is not visible to Python until returned).
pub(crate) fn to_py_bytes<'py>(py: Python<'py>, data: &Bytes) -> PyResult<Bound<'py, PyAny>> {
    if data.len() < COPY_THRESHOLD {
        return Ok(PyBytes::new(py, data).into_any());
    }
    let len = ffi::Py_ssize_t::try_from(data.len())
        .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("frame too large"))?;
    // SAFETY: a fresh, uninitialised bytes object of `len` bytes, owned here
    // and filled completely before anyone else can see it.
    unsafe {
        let raw = ffi::PyBytes_FromStringAndSize(std::ptr::null(), len);
        let obj = Bound::from_owned_ptr_or_err(py, raw)?;
        let dst = ffi::PyBytes_AsString(obj.as_ptr()).cast::<u8>();
        if dst.is_null() {
            return Err(PyErr::fetch(py));
        }
        let dst = dst as usize;
        py.detach(|| {
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst as *mut u8, data.len());
        });
        Ok(obj)
    }
}

/// A received frame, shared with the socket's read buffer: no copy until
/// `bytes(frame)` (or `frame.bytes`) asks for one. Supports the buffer
/// protocol (read-only), so `memoryview(frame)`, `numpy.frombuffer(frame)`
/// and file writes use the memory as it is. As `zmq.Frame` with `copy=False`.
#[pyclass(module = "dafka.zmtp", frozen)]
pub(crate) struct Frame {
    data: Bytes,
}

impl Frame {
    pub(crate) fn new(data: Bytes) -> Self {
        Frame { data }
    }
}

#[pymethods]
impl Frame {
    /// `Frame(data)`: a frame holding a copy of (or a reference to) `data`.
    #[new]
    fn py_new(data: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Frame {
            data: to_bytes(data, true)?,
        })
    }

    /// The frame's content as `bytes` (a copy).
    #[getter]
    fn bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py_bytes(py, &self.data)
    }

    /// A read-only `memoryview` of the frame, without copying.
    #[getter]
    fn buffer<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: `slf` supports the buffer protocol (below).
        unsafe {
            Bound::from_owned_ptr_or_err(slf.py(), ffi::PyMemoryView_FromObject(slf.as_ptr()))
        }
    }

    fn __bytes__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py_bytes(py, &self.data)
    }

    fn __len__(&self) -> usize {
        self.data.len()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        if let Ok(f) = other.cast::<Frame>() {
            return f.get().data == self.data;
        }
        other
            .cast::<PyBytes>()
            .is_ok_and(|b| b.as_bytes() == &self.data[..])
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.data.hash(&mut h);
        h.finish()
    }

    fn __repr__(&self) -> String {
        let shown = &self.data[..self.data.len().min(32)];
        let more = if self.data.len() > 32 { "..." } else { "" };
        format!(
            "<dafka.zmtp.Frame {} bytes: b'{}'{more}>",
            self.data.len(),
            shown.escape_ascii()
        )
    }

    /// Read-only export of the frame's memory; the view holds a reference to
    /// the frame, which keeps the memory alive.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if flags & ffi::PyBUF_WRITABLE != 0 {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "a received frame is read-only",
            ));
        }
        let data = &slf.get().data;
        let len = ffi::Py_ssize_t::try_from(data.len())
            .map_err(|_| pyo3::exceptions::PyBufferError::new_err("frame too large"))?;
        // SAFETY: the memory is owned by the frame (immutable `Bytes`), which
        // the view references (`obj`) until it is released.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                data.as_ptr().cast_mut().cast(),
                len,
                1,
                flags,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(PyErr::fetch(slf.py()))
        }
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
