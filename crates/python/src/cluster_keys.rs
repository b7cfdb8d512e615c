//! `dafka.ClusterKeys`: the CURVE keys of one Dafka cluster member (`dafka_node::ClusterKeys`),
//! handed to `Tower`, `Store`, `Producer`, `Consumer` and `PartitionReader` as `curve=`.
//! Conversion only.

use dafka_node::ClusterKeys;
use dafka_zmtp::{CurveKeyPair, z85_encode};
use pyo3::prelude::*;

use crate::errors;
use crate::security::{key, keys};

/// One member's keys: the cluster's key pair (the same on every member: bound sockets serve
/// with it), the member's own key pair (its connecting sockets present it), and the public
/// keys of the members allowed to connect (this member's own included if it talks to itself,
/// as a `LocalCluster`'s tower and store do).
#[pyclass(name = "ClusterKeys", module = "dafka", frozen)]
pub(crate) struct PyClusterKeys {
    pub(crate) keys: ClusterKeys,
    allowed: Vec<[u8; 32]>,
}

#[pymethods]
impl PyClusterKeys {
    #[new]
    #[pyo3(signature = (cluster_secretkey, member_secretkey, allowed_keys))]
    fn new(
        cluster_secretkey: &Bound<'_, PyAny>,
        member_secretkey: &Bound<'_, PyAny>,
        allowed_keys: Vec<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let pair = |name, v| {
            key(name, v)?
                .map(CurveKeyPair::from_secret)
                .ok_or_else(|| errors::invalid(format!("{name} must be a key, not None")))
        };
        let cluster = pair("cluster_secretkey", cluster_secretkey)?;
        let member = pair("member_secretkey", member_secretkey)?;
        let allowed = keys("allowed_keys", &allowed_keys)?;
        Ok(PyClusterKeys {
            keys: ClusterKeys::new(cluster, member, allowed.iter().copied()),
            allowed,
        })
    }

    /// The cluster's public key (Z85).
    #[getter]
    fn cluster_publickey(&self) -> String {
        z85_encode(self.keys.cluster.public())
    }

    /// This member's public key (Z85): put it in the other members' `allowed_keys`.
    #[getter]
    fn member_publickey(&self) -> String {
        z85_encode(self.keys.member.public())
    }

    /// The allowed member public keys (Z85), as given.
    #[getter]
    fn allowed_keys(&self) -> Vec<String> {
        self.allowed.iter().map(|k| z85_encode(k)).collect()
    }

    fn __repr__(&self) -> String {
        // Never the secret keys.
        format!(
            "<dafka.ClusterKeys cluster={} member={} allowed={}>",
            self.cluster_publickey(),
            self.member_publickey(),
            self.allowed.len()
        )
    }
}

/// The Rust keys of an optional `curve=` argument.
pub(crate) fn security(curve: Option<&Bound<'_, PyClusterKeys>>) -> Option<ClusterKeys> {
    curve.map(|c| c.get().keys.clone())
}
