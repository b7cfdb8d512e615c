//! The security options of `dafka.zmtp.Socket` (libzmq's `curve_*` and `plain_*`, and an
//! `authenticator`), `dafka.zmtp.curve_keypair()` and `curve_public()`.
//!
//! Conversion only: the options are gathered one by one (as `setsockopt` sets them) and turned
//! into one [`MechanismConfig`] when the socket starts (or at construction, where all keyword
//! options are known at once).

use bytes::Bytes;
use dafka_zmtp::{
    AuthDecision, Authenticator, Credentials, CurveKeyPair, MechanismConfig, z85_decode_key,
    z85_encode,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFrozenSet, PyList, PySet, PyString, PyTuple};

use crate::{errors, runtime};

/// libzmq's option numbers (`zmq.h`) of the security options.
pub(crate) const OPTION_NUMBERS: &[(i32, &str)] = &[
    (43, "mechanism"),
    (44, "plain_server"),
    (45, "plain_username"),
    (46, "plain_password"),
    (47, "curve_server"),
    (48, "curve_publickey"),
    (49, "curve_secretkey"),
    (50, "curve_serverkey"),
];

/// The security options as set so far.
#[derive(Default, Clone)]
pub(crate) struct Security {
    curve_server: bool,
    curve_publickey: Option<[u8; 32]>,
    curve_secretkey: Option<[u8; 32]>,
    curve_serverkey: Option<[u8; 32]>,
    plain_server: bool,
    plain_username: Option<Bytes>,
    plain_password: Option<Bytes>,
    authenticator: Option<Authenticator>,
}

impl Security {
    /// Sets `name` if it is a security option; `Ok(false)` when it is not one.
    pub(crate) fn set(&mut self, name: &str, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        match name {
            "curve_server" => self.curve_server = truth(name, value)?,
            "plain_server" => self.plain_server = truth(name, value)?,
            "curve_publickey" => self.curve_publickey = key(name, value)?,
            "curve_secretkey" => self.curve_secretkey = key(name, value)?,
            "curve_serverkey" => self.curve_serverkey = key(name, value)?,
            "plain_username" => self.plain_username = text(name, value)?,
            "plain_password" => self.plain_password = text(name, value)?,
            "authenticator" => self.authenticator = authenticator(value)?,
            "mechanism" => return Err(errors::invalid("option mechanism is read-only")),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// libzmq's `ZMQ_MECHANISM` value and the readable options, as `getsockopt` returns them.
    pub(crate) fn get<'py>(
        &self,
        py: Python<'py>,
        name: &str,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let z85 = |k: &Option<[u8; 32]>| {
            PyBytes::new(py, k.map(|k| z85_encode(&k)).unwrap_or_default().as_bytes())
        };
        Ok(Some(match name {
            // What the options set so far select, complete or not (as libzmq answers).
            "mechanism" => {
                let n: i64 = if self.uses_curve() {
                    2
                } else if self.uses_plain() {
                    1
                } else {
                    0
                };
                n.into_pyobject(py)?.into_any()
            }
            "curve_server" => i64::from(self.curve_server).into_pyobject(py)?.into_any(),
            "plain_server" => i64::from(self.plain_server).into_pyobject(py)?.into_any(),
            "plain_username" => {
                PyBytes::new(py, self.plain_username.as_deref().unwrap_or_default()).into_any()
            }
            "curve_publickey" => z85(&self.curve_publickey).into_any(),
            "curve_serverkey" => z85(&self.curve_serverkey).into_any(),
            "plain_password" | "curve_secretkey" => {
                return Err(errors::invalid(format!(
                    "option {name} cannot be read back"
                )));
            }
            _ => return Ok(None),
        }))
    }

    /// The mechanism these options describe; a missing or contradictory option is an
    /// `InvalidArgumentError` naming it.
    pub(crate) fn mechanism(&self) -> PyResult<MechanismConfig> {
        let (curve, plain) = (self.uses_curve(), self.uses_plain());
        if curve && plain {
            return Err(errors::invalid(
                "curve_* and plain_* options cannot be combined: a socket uses one mechanism",
            ));
        }
        if curve {
            let secret = self.curve_secretkey.ok_or_else(|| {
                errors::invalid("CURVE needs curve_secretkey (see dafka.zmtp.curve_keypair())")
            })?;
            let keypair = CurveKeyPair::from_secret(secret);
            if self.curve_publickey.is_some_and(|p| &p != keypair.public()) {
                return Err(errors::invalid(
                    "curve_publickey is not the public key of curve_secretkey",
                ));
            }
            if self.curve_server {
                if self.curve_serverkey.is_some() {
                    return Err(errors::invalid(
                        "curve_serverkey is for clients; a curve_server has none",
                    ));
                }
                // Without an authenticator every client that knows our public key is let in
                // (libzmq without a ZAP handler: "Stonehouse").
                let authenticator = self
                    .authenticator
                    .clone()
                    .unwrap_or_else(Authenticator::allow_all);
                return Ok(MechanismConfig::CurveServer {
                    keypair,
                    authenticator,
                });
            }
            let server_key = self.curve_serverkey.ok_or_else(|| {
                errors::invalid("a CURVE client needs curve_serverkey (or set curve_server=True)")
            })?;
            self.no_authenticator()?;
            return Ok(MechanismConfig::CurveClient {
                keypair,
                server_key,
            });
        }
        if self.plain_server {
            // libzmq refuses every PLAIN client without a ZAP handler; so do we, loudly.
            let authenticator = self.authenticator.clone().ok_or_else(|| {
                errors::invalid(
                    "plain_server needs an authenticator (a dict of username: password, \
                     or a callable)",
                )
            })?;
            return Ok(MechanismConfig::PlainServer { authenticator });
        }
        if plain {
            self.no_authenticator()?;
            let mechanism = MechanismConfig::PlainClient {
                username: self.plain_username.clone().unwrap_or_default(),
                password: self.plain_password.clone().unwrap_or_default(),
            };
            mechanism
                .validate()
                .map_err(|e| errors::invalid(e.to_string()))?;
            return Ok(mechanism);
        }
        self.no_authenticator()?;
        Ok(MechanismConfig::Null)
    }

    fn uses_curve(&self) -> bool {
        self.curve_server
            || self.curve_serverkey.is_some()
            || self.curve_publickey.is_some()
            || self.curve_secretkey.is_some()
    }

    fn uses_plain(&self) -> bool {
        self.plain_server || self.plain_username.is_some() || self.plain_password.is_some()
    }

    fn no_authenticator(&self) -> PyResult<()> {
        if self.authenticator.is_some() {
            Err(errors::invalid(
                "authenticator applies to servers: set curve_server=True or plain_server=True",
            ))
        } else {
            Ok(())
        }
    }
}

fn truth(name: &str, value: &Bound<'_, PyAny>) -> PyResult<bool> {
    value
        .is_truthy()
        .map_err(|_| errors::invalid(format!("{name} must be a bool")))
}

/// A list of keys (each as [`key`], `None` refused), e.g. `allowed_keys`.
pub(crate) fn keys(name: &str, values: &[Bound<'_, PyAny>]) -> PyResult<Vec<[u8; 32]>> {
    values
        .iter()
        .map(|k| key(name, k)?.ok_or_else(|| errors::invalid(format!("{name} holds None"))))
        .collect()
}

/// A 32-byte key: 40 characters of Z85 (`str` or `bytes`) or 32 raw bytes; `None` unsets.
pub(crate) fn key(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<[u8; 32]>> {
    if value.is_none() {
        return Ok(None);
    }
    let text: Option<String> = if let Ok(s) = value.cast::<PyString>() {
        Some(s.to_str()?.to_owned())
    } else if let Ok(b) = value.cast::<PyBytes>() {
        let b = b.as_bytes();
        if let Ok(raw) = <[u8; 32]>::try_from(b) {
            return Ok(Some(raw));
        }
        // libzmq also accepts the 41-byte form with its NUL terminator.
        let b = b.strip_suffix(b"\0").unwrap_or(b);
        Some(String::from_utf8_lossy(b).into_owned())
    } else {
        None
    };
    let text = text.ok_or_else(|| {
        errors::invalid(format!(
            "{name} must be a 40-character Z85 str/bytes or 32 raw bytes"
        ))
    })?;
    z85_decode_key(&text)
        .map(Some)
        .map_err(|e| errors::invalid(format!("{name}: {e}")))
}

fn text(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<Bytes>> {
    if value.is_none() {
        return Ok(None);
    }
    let bytes = if let Ok(s) = value.cast::<PyString>() {
        Bytes::copy_from_slice(s.to_str()?.as_bytes())
    } else if let Ok(b) = value.cast::<PyBytes>() {
        Bytes::copy_from_slice(b.as_bytes())
    } else {
        return Err(errors::invalid(format!("{name} must be str or bytes")));
    };
    if bytes.len() > 255 {
        return Err(errors::invalid(format!(
            "{name} of {} bytes exceeds 255 bytes",
            bytes.len()
        )));
    }
    Ok(Some(bytes))
}

/// `authenticator=`: a collection of CURVE public keys, a dict of PLAIN credentials, or a
/// callable `(address, mechanism, credentials) -> True | False | reason`.
fn authenticator(value: &Bound<'_, PyAny>) -> PyResult<Option<Authenticator>> {
    if value.is_none() {
        return Ok(None);
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let creds = d
            .iter()
            .map(|(u, p)| {
                let u = text("authenticator username", &u)?.unwrap_or_default();
                let p = text("authenticator password", &p)?.unwrap_or_default();
                Ok((u, p))
            })
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(Some(Authenticator::plain_credentials(creds)));
    }
    let collection = value.is_instance_of::<PyList>()
        || value.is_instance_of::<PyTuple>()
        || value.is_instance_of::<PySet>()
        || value.is_instance_of::<PyFrozenSet>();
    if collection {
        let keys = value
            .try_iter()?
            .map(|k| {
                key("authenticator key", &k?)?
                    .ok_or_else(|| errors::invalid("authenticator keys cannot be None"))
            })
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(Some(Authenticator::curve_keys(keys)));
    }
    if value.is_callable() {
        let f: Py<PyAny> = value.clone().unbind();
        return Ok(Some(Authenticator::from_fn(move |req| {
            off_the_io_worker(|| {
                runtime::attach(|py| call(py, &f, req)).unwrap_or_else(|| {
                    AuthDecision::Deny("the Python interpreter is exiting".to_owned())
                })
            })
        })));
    }
    Err(errors::invalid(
        "authenticator must be a list/set of CURVE public keys, a dict of PLAIN \
         username: password, or a callable",
    ))
}

/// Runs `f`, which blocks (waits for the GIL, runs Python), where the handshake calls it: on a
/// worker of the multi-threaded runtime, through `block_in_place`, so that the worker's other
/// tasks (other connections' I/O) move to another thread meanwhile. Elsewhere (no runtime, or
/// a current-thread one, where `block_in_place` would panic) it simply runs `f`.
fn off_the_io_worker<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Calls the Python authenticator; an exception or an answer of the wrong type refuses.
fn call(py: Python<'_>, f: &Py<PyAny>, req: &dafka_zmtp::AuthRequest<'_>) -> AuthDecision {
    let result = match req.credentials {
        Credentials::Curve { public_key } => {
            f.call1(py, (req.address, "CURVE", z85_encode(public_key)))
        }
        Credentials::Plain { username, password } => f.call1(
            py,
            (
                req.address,
                "PLAIN",
                (PyBytes::new(py, username), PyBytes::new(py, password)),
            ),
        ),
        _ => return AuthDecision::Deny("unsupported mechanism".to_owned()),
    };
    match result {
        Ok(answer) => {
            let answer = answer.bind(py);
            if let Ok(reason) = answer.cast::<PyString>() {
                AuthDecision::Deny(reason.to_string())
            } else if answer.is_truthy().unwrap_or(false) {
                AuthDecision::Allow
            } else {
                AuthDecision::Deny("refused by the authenticator".to_owned())
            }
        }
        Err(e) => AuthDecision::Deny(format!("authenticator raised {e}")),
    }
}

/// A new CURVE key pair as `(public, secret)`, each 40 characters of Z85 (the form libzmq's
/// `zmq_curve_keypair` and pyzmq's `zmq.curve_keypair` give, as `str`).
#[pyfunction]
pub(crate) fn curve_keypair() -> (String, String) {
    let keys = CurveKeyPair::generate();
    (z85_encode(keys.public()), z85_encode(keys.secret()))
}

/// The Z85 public key of a Z85 (or raw 32-byte) secret key.
#[pyfunction]
pub(crate) fn curve_public(secret: &Bound<'_, PyAny>) -> PyResult<String> {
    let secret = key("secret", secret)?.ok_or_else(|| errors::invalid("secret cannot be None"))?;
    Ok(z85_encode(CurveKeyPair::from_secret(secret).public()))
}
