//! Reading the zyre 2.0.1 captures in tests/data/zre/ (extracted by
//! scripts/extract_zre_vectors.py from ../shared/vectors/zre/).
#![allow(dead_code, unreachable_pub, unused_imports)]

use std::collections::BTreeMap;

use bytes::Bytes;
use dafka_zre_proto::Uuid;

pub const A: &str = "378BA399C87C4B63AAC285B55D29687A";
pub const B: &str = "99B8891917304FDCBA684C78F5DD99EB";

pub fn uuid(s: &str) -> Uuid {
    s.parse().unwrap()
}

pub fn rows(name: &str) -> Vec<Vec<String>> {
    let path = format!("{}/../../tests/data/zre/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

pub use dafka_testkit::unhex;

/// One captured ZRE message.
pub struct Captured {
    pub capture: String,
    pub t_ms: f64,
    pub from: String,
    pub kind: String,
    pub frames: Vec<Bytes>,
    pub fields: BTreeMap<String, String>,
}

pub fn messages() -> Vec<Captured> {
    rows("messages.tsv")
        .into_iter()
        .map(|r| Captured {
            capture: r[0].clone(),
            t_ms: r[1].parse().unwrap(),
            from: r[2].clone(),
            kind: r[3].clone(),
            frames: r[4].split(' ').map(|f| Bytes::from(unhex(f))).collect(),
            fields: dafka_testkit::fields(r.get(5).map(String::as_str).unwrap_or("")),
        })
        .collect()
}
