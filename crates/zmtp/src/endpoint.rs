//! Endpoint strings: `tcp://host:port`, `ipc:///path`, `inproc://name`.

use std::path::PathBuf;

use crate::error::Error;

/// A parsed endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `tcp://host:port`. `host` is `*`, an IPv4 address, a bracket-less IPv6
    /// address or a host name; `port` 0 (or `*`) asks the OS for a free port
    /// when binding.
    Tcp { host: String, port: u16 },
    /// `ipc://path`: a Unix domain socket.
    Ipc(PathBuf),
    /// `inproc://name`: the in-process transport.
    Inproc(String),
}

impl Endpoint {
    /// Parse an endpoint string.
    pub(crate) fn parse(s: &str) -> Result<Endpoint, Error> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| Error::endpoint(s, "missing `transport://`"))?;
        match scheme {
            "tcp" => {
                let (host, port) = rest
                    .rsplit_once(':')
                    .ok_or_else(|| Error::endpoint(s, "missing `:port`"))?;
                let port = if port == "*" {
                    0
                } else {
                    port.parse::<u16>()
                        .map_err(|_| Error::endpoint(s, "port is not a number in 0..=65535"))?
                };
                let host = if let Some(inner) = host.strip_prefix('[') {
                    inner
                        .strip_suffix(']')
                        .ok_or_else(|| Error::endpoint(s, "unbalanced `[` in IPv6 address"))?
                } else {
                    host
                };
                if host.is_empty() {
                    return Err(Error::endpoint(s, "empty host"));
                }
                // A `;source` prefix (libzmq's `tcp://src;dst`) is not supported.
                if host.contains(';') {
                    return Err(Error::endpoint(s, "source addresses are not supported"));
                }
                Ok(Endpoint::Tcp {
                    host: host.to_owned(),
                    port,
                })
            }
            "ipc" => {
                if rest.is_empty() {
                    return Err(Error::endpoint(s, "empty path"));
                }
                Ok(Endpoint::Ipc(PathBuf::from(rest)))
            }
            "inproc" => {
                if rest.is_empty() {
                    return Err(Error::endpoint(s, "empty name"));
                }
                Ok(Endpoint::Inproc(rest.to_owned()))
            }
            _ => Err(Error::endpoint(
                s,
                "unknown transport (expected tcp, ipc or inproc)",
            )),
        }
    }
}

/// Format a TCP endpoint the way libzmq reports it (`tcp://[::1]:5555`).
pub(crate) fn tcp_string(addr: std::net::SocketAddr) -> String {
    match addr {
        std::net::SocketAddr::V4(a) => format!("tcp://{}:{}", a.ip(), a.port()),
        std::net::SocketAddr::V6(a) => format!("tcp://[{}]:{}", a.ip(), a.port()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_forms() {
        assert_eq!(
            Endpoint::parse("tcp://127.0.0.1:5555").unwrap(),
            Endpoint::Tcp {
                host: "127.0.0.1".into(),
                port: 5555
            }
        );
        assert_eq!(
            Endpoint::parse("tcp://[::1]:0").unwrap(),
            Endpoint::Tcp {
                host: "::1".into(),
                port: 0
            }
        );
        assert_eq!(
            Endpoint::parse("tcp://*:*").unwrap(),
            Endpoint::Tcp {
                host: "*".into(),
                port: 0
            }
        );
        assert_eq!(
            Endpoint::parse("tcp://localhost:1").unwrap(),
            Endpoint::Tcp {
                host: "localhost".into(),
                port: 1
            }
        );
    }

    #[test]
    fn parses_ipc_and_inproc() {
        assert_eq!(
            Endpoint::parse("ipc:///tmp/x.sock").unwrap(),
            Endpoint::Ipc(PathBuf::from("/tmp/x.sock"))
        );
        assert_eq!(
            Endpoint::parse("inproc://abc").unwrap(),
            Endpoint::Inproc("abc".into())
        );
    }

    #[test]
    fn rejects_bad_endpoints() {
        for bad in [
            "",
            "tcp:/x:1",
            "tcp://127.0.0.1",
            "tcp://127.0.0.1:99999",
            "tcp://:5",
            "tcp://[::1:5",
            "udp://1.2.3.4:5",
            "ipc://",
            "inproc://",
        ] {
            assert!(
                matches!(Endpoint::parse(bad), Err(Error::InvalidEndpoint { .. })),
                "{bad:?} was accepted"
            );
        }
    }

    proptest::proptest! {
        /// Every address this crate reports back parses to that address.
        #[test]
        fn reported_tcp_endpoints_parse_back(addr in proptest::prelude::any::<std::net::SocketAddr>()) {
            let parsed = Endpoint::parse(&tcp_string(addr)).unwrap();
            proptest::prop_assert_eq!(
                parsed,
                Endpoint::Tcp { host: addr.ip().to_string(), port: addr.port() }
            );
        }

        #[test]
        fn inproc_and_ipc_names_parse_back(name in "[^\\x00]{1,40}") {
            proptest::prop_assert_eq!(
                Endpoint::parse(&format!("inproc://{name}")).unwrap(),
                Endpoint::Inproc(name.clone())
            );
            proptest::prop_assert_eq!(
                Endpoint::parse(&format!("ipc://{name}")).unwrap(),
                Endpoint::Ipc(PathBuf::from(&name))
            );
        }

        /// Any string is either an endpoint or a typed error, never a panic.
        #[test]
        fn any_string_parses_or_is_rejected(s in "(tcp|ipc|inproc|udp)?(://)?.{0,30}") {
            match Endpoint::parse(&s) {
                Ok(_) | Err(Error::InvalidEndpoint { .. }) => {}
                Err(e) => proptest::prop_assert!(false, "{s:?}: unexpected error {e}"),
            }
        }
    }

    #[test]
    fn formats_like_libzmq() {
        assert_eq!(
            tcp_string("127.0.0.1:5".parse().unwrap()),
            "tcp://127.0.0.1:5"
        );
        assert_eq!(tcp_string("[::1]:7".parse().unwrap()), "tcp://[::1]:7");
    }
}
