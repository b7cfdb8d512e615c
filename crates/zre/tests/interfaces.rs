//! Options by interface name or address, and multicast groups: what each resolves to on this
//! host's loopback (every host has `lo` with 127.0.0.1/8 and, unless IPv6 is off, ::1).
//! Beacons across real interfaces are tested in namespaces (`tests/test_zre_netns.py`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4};

use dafka_zre::{CallerError, Error, IPV6_ALL_NODES, Options};

#[test]
fn loopback_by_name_and_by_address_is_the_loopback_broadcast() {
    let expected = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 255, 255, 255), 5999));
    for spec in ["lo", "127.0.0.1"] {
        let o = Options::interface(spec, 5999, false).unwrap();
        assert_eq!(o.ip, IpAddr::V4(Ipv4Addr::LOCALHOST), "{spec}");
        // From the netmask (/8), not getifaddrs' broadcast field (lo has none).
        assert_eq!(o.broadcast, expected, "{spec}");
    }
}

#[test]
fn ipv6_by_address_goes_to_all_nodes_on_that_interface() {
    let Ok(o) = Options::interface("::1", 5999, false) else {
        // IPv6 disabled on this host: nothing to resolve.
        return;
    };
    assert_eq!(o.ip, IpAddr::V6(Ipv6Addr::LOCALHOST));
    let SocketAddr::V6(dest) = o.broadcast else {
        panic!("not IPv6: {:?}", o.broadcast)
    };
    assert_eq!((*dest.ip(), dest.port()), (IPV6_ALL_NODES, 5999));
    assert_eq!(dest.scope_id(), o.interface_index);
    assert_ne!(o.interface_index, 0, "lo's index");
}

#[test]
fn multicast_groups_must_match_the_family() {
    let o = Options::interface("lo", 5999, false).unwrap();
    let group = "225.25.25.25".parse().unwrap();
    let m = o.clone().with_multicast(group).unwrap();
    assert_eq!(m.broadcast, SocketAddr::new(group, 5999));
    for bad in ["10.0.0.1", "ff02::1"] {
        let err = o.clone().with_multicast(bad.parse().unwrap()).unwrap_err();
        assert!(
            matches!(err, Error::Caller(CallerError::Config(_))),
            "{bad}: {err}"
        );
    }
}

#[test]
fn unknown_interfaces_are_the_callers_mistake() {
    for (spec, ipv6) in [("no-such-if0", false), ("192.0.2.77", false), ("lo", true)] {
        match Options::interface(spec, 5999, ipv6) {
            // `lo` may have ::1 (then that is right); the others never exist.
            Ok(o) if spec == "lo" => assert_eq!(o.ip, IpAddr::V6(Ipv6Addr::LOCALHOST)),
            Ok(o) => panic!("{spec} resolved to {o:?}"),
            Err(e) => assert!(matches!(e, Error::Caller(CallerError::Config(_))), "{e}"),
        }
    }
}
