//! The discovery state machine under a virtual clock (an `Instant` advanced by hand).

use std::time::{Duration, Instant};

use dafka_proto::{
    ANSWER_BEACON_GAP, Action, CallerError, Cause, Discovery, DiscoveryConfig, DiscoveryError,
    NodeId,
};

const INTERVAL: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_secs(4);

fn node(n: u8) -> NodeId {
    NodeId::from_bytes([n; 16])
}

fn endpoint(port: u16) -> String {
    format!("tcp://127.0.0.1:{port}")
}

fn config() -> DiscoveryConfig {
    let mut c = DiscoveryConfig::new();
    c.beacon_interval = INTERVAL;
    c.peer_timeout = TIMEOUT;
    c
}

fn drain(d: &mut Discovery) -> Vec<Action> {
    std::iter::from_fn(|| d.poll_action()).collect()
}

fn connect(n: u8, port: u16) -> Action {
    Action::Connect {
        node: node(n),
        endpoint: endpoint(port),
    }
}

fn disconnect(n: u8, port: u16, cause: Cause) -> Action {
    Action::Disconnect {
        node: node(n),
        endpoint: endpoint(port),
        cause,
    }
}

/// A discovery of node 0 started at `t0` whose first beacon went out.
fn started(config: DiscoveryConfig, t0: Instant) -> Discovery {
    let mut d = Discovery::new(config, node(0), t0).unwrap();
    assert_eq!(
        d.poll_timeout(),
        Some(t0),
        "the first beacon is due at once"
    );
    d.handle_timeout(t0);
    assert_eq!(drain(&mut d), [Action::SendBeacon]);
    d
}

#[test]
fn invalid_intervals_are_refused() {
    let t0 = Instant::now();
    let mut c = config();
    c.peer_timeout = INTERVAL;
    assert!(matches!(
        Discovery::new(c, node(0), t0),
        Err(CallerError::Config(_))
    ));
    let mut c = config();
    c.beacon_interval = Duration::ZERO;
    assert!(c.validate().is_err());
    assert!(config().validate().is_ok());
}

#[test]
fn beacons_go_out_every_interval() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    assert_eq!(d.poll_timeout(), Some(t0 + INTERVAL));
    d.handle_timeout(t0 + INTERVAL - Duration::from_millis(1));
    assert!(drain(&mut d).is_empty(), "nothing before its time");
    // A driver waking late: the next beacon is an interval after this one.
    let late = t0 + INTERVAL + Duration::from_millis(30);
    d.handle_timeout(late);
    assert_eq!(drain(&mut d), [Action::SendBeacon]);
    assert_eq!(d.poll_timeout(), Some(late + INTERVAL));
}

#[test]
fn a_tower_subscribing_gets_a_beacon_at_once() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    let t = t0 + Duration::from_millis(300);
    d.handle_tower_subscribed(t);
    assert_eq!(drain(&mut d), [Action::SendBeacon]);
    assert_eq!(d.poll_timeout(), Some(t + INTERVAL));
}

#[test]
fn the_first_beacon_of_a_peer_connects_and_a_repeat_refreshes() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    d.handle_beacon(node(1), &endpoint(9001), t0).unwrap();
    assert_eq!(drain(&mut d), [connect(1, 9001)]);
    assert_eq!(d.peers(), 1);
    // The same beacon again: nothing to do, but the peer counts as heard now.
    let t = t0 + Duration::from_secs(3);
    d.handle_beacon(node(1), &endpoint(9001), t).unwrap();
    assert!(drain(&mut d).is_empty());
    assert_eq!(d.peers(), 1);
    // Four seconds after the first beacon, but only one after the refresh: kept.
    d.handle_timeout(t0 + TIMEOUT);
    assert!(
        !drain(&mut d)
            .iter()
            .any(|a| matches!(a, Action::Disconnect { .. })),
        "a refreshed peer was dropped"
    );
    assert_eq!(d.peers(), 1);
}

#[test]
fn a_peer_at_a_new_endpoint_is_reconnected() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    d.handle_beacon(node(1), &endpoint(9001), t0).unwrap();
    drain(&mut d);
    d.handle_beacon(node(1), &endpoint(9002), t0 + Duration::from_secs(2))
        .unwrap();
    assert_eq!(
        drain(&mut d),
        [disconnect(1, 9001, Cause::Moved), connect(1, 9002)]
    );
    assert_eq!(d.peers(), 1);
}

#[test]
fn the_own_id_is_ignored() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    d.handle_beacon(node(0), &endpoint(9000), t0).unwrap();
    d.handle_zre_peer(node(0), &endpoint(9000), t0).unwrap();
    assert!(drain(&mut d).is_empty());
    assert_eq!(d.peers(), 0);
    assert_eq!(d.poll_timeout(), Some(t0 + INTERVAL), "no newcomer answer");
}

#[test]
fn peers_beyond_max_peers_are_refused_until_one_goes() {
    let t0 = Instant::now();
    let mut c = config();
    c.max_peers = 2;
    let mut d = started(c, t0);
    d.handle_beacon(node(1), &endpoint(9001), t0).unwrap();
    d.handle_zre_peer(node(2), &endpoint(9002), t0).unwrap();
    drain(&mut d);
    assert_eq!(
        d.handle_beacon(node(3), &endpoint(9003), t0),
        Err(DiscoveryError::TooManyPeers {
            node: node(3),
            max: 2
        })
    );
    // Refused before its endpoint is looked at.
    assert!(matches!(
        d.handle_zre_peer(node(3), "ipc:///x", t0),
        Err(DiscoveryError::TooManyPeers { .. })
    ));
    assert!(drain(&mut d).is_empty());
    assert_eq!(d.peers(), 2);
    // Known peers still refresh and move at the limit.
    d.handle_beacon(node(1), &endpoint(9011), t0).unwrap();
    assert_eq!(
        drain(&mut d),
        [disconnect(1, 9001, Cause::Moved), connect(1, 9011)]
    );
    d.handle_zre_gone(node(2));
    drain(&mut d);
    d.handle_beacon(node(3), &endpoint(9003), t0).unwrap();
    assert_eq!(drain(&mut d).first(), Some(&connect(3, 9003)));
    assert_eq!(d.peers(), 2);
}

#[test]
fn endpoints_other_than_tcp_host_port_are_refused() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    for bad in ["ipc:///tmp/x", "tcp://:9", "tcp://h:70000", "tcp://h", ""] {
        assert_eq!(
            d.handle_beacon(node(1), bad, t0),
            Err(DiscoveryError::BadEndpoint {
                node: node(1),
                endpoint: bad.to_owned()
            }),
            "{bad}"
        );
    }
    assert!(drain(&mut d).is_empty());
    assert_eq!(d.peers(), 0);
    assert_eq!(d.poll_timeout(), Some(t0 + INTERVAL), "no newcomer answer");
    // A known peer moving to a bad endpoint: the old one is disconnected and the peer dropped.
    d.handle_beacon(node(1), &endpoint(9001), t0).unwrap();
    drain(&mut d);
    assert!(d.handle_beacon(node(1), "udp://x:1", t0).is_err());
    assert_eq!(drain(&mut d), [disconnect(1, 9001, Cause::Moved)]);
    assert_eq!(d.peers(), 0);
}

#[test]
fn a_newcomer_is_answered_at_once_after_a_quiet_spell() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    let t = t0 + Duration::from_millis(500);
    d.handle_beacon(node(1), &endpoint(9001), t).unwrap();
    assert_eq!(d.poll_timeout(), Some(t), "the answer is due at once");
    drain(&mut d);
    d.handle_timeout(t);
    assert_eq!(drain(&mut d), [Action::SendBeacon]);
    // The periodic beacon counts from the answer.
    assert_eq!(d.poll_timeout(), Some(t0 + INTERVAL));
    d.handle_timeout(t0 + INTERVAL);
    assert!(
        !drain(&mut d).contains(&Action::SendBeacon),
        "the answer restarted the interval"
    );
    assert_eq!(d.poll_timeout(), Some(t + INTERVAL));
}

#[test]
fn newcomers_right_after_a_beacon_are_answered_a_gap_later_together() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    let t = t0 + Duration::from_millis(30);
    d.handle_beacon(node(1), &endpoint(9001), t).unwrap();
    d.handle_beacon(node(2), &endpoint(9002), t + Duration::from_millis(10))
        .unwrap();
    drain(&mut d);
    assert_eq!(d.poll_timeout(), Some(t0 + ANSWER_BEACON_GAP));
    d.handle_timeout(t0 + ANSWER_BEACON_GAP - Duration::from_millis(1));
    assert!(drain(&mut d).is_empty());
    d.handle_timeout(t0 + ANSWER_BEACON_GAP);
    assert_eq!(drain(&mut d), [Action::SendBeacon], "one beacon for both");
}

#[test]
fn zre_peers_and_refreshes_are_not_answered() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    d.handle_zre_peer(node(1), &endpoint(9001), t0 + Duration::from_millis(500))
        .unwrap();
    assert_eq!(drain(&mut d), [connect(1, 9001)]);
    assert_eq!(d.poll_timeout(), Some(t0 + INTERVAL));
    // A tower announcing a peer ZRE found already: a refresh, no answer.
    d.handle_beacon(node(1), &endpoint(9001), t0 + Duration::from_millis(600))
        .unwrap();
    assert!(drain(&mut d).is_empty());
    assert_eq!(d.poll_timeout(), Some(t0 + INTERVAL));
}

#[test]
fn silent_peers_are_dropped_at_the_sweep_after_the_timeout() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    let heard = t0 + Duration::from_millis(500);
    d.handle_beacon(node(1), &endpoint(9001), heard).unwrap();
    d.handle_beacon(node(2), &endpoint(9002), heard).unwrap();
    drain(&mut d);
    let mut now = t0;
    let mut dropped = Vec::new();
    // Node 2 keeps beaconing; node 1 falls silent. Sweeps run every interval (t0, t0+1s, ...).
    while now < t0 + Duration::from_secs(10) {
        now = d.poll_timeout().unwrap();
        d.handle_beacon(node(2), &endpoint(9002), now).unwrap();
        d.handle_timeout(now);
        for a in drain(&mut d) {
            if let Action::Disconnect { node, cause, .. } = a {
                dropped.push((node, cause, now));
            }
        }
    }
    // Silent from 0.5 s: 4 s of silence at 4.5 s, first seen at the sweep of 5 s.
    assert_eq!(
        dropped,
        [(node(1), Cause::Silent, t0 + Duration::from_secs(5))]
    );
    assert_eq!(d.peers(), 1);
}

#[test]
fn without_peers_only_the_beacon_wakes_the_node() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    d.handle_zre_peer(node(1), &endpoint(9001), t0).unwrap();
    drain(&mut d);
    // The sweep is due with the beacon; with a peer the earlier of the two counts.
    assert_eq!(d.poll_timeout(), Some(t0 + INTERVAL));
    d.handle_tower_subscribed(t0 + Duration::from_millis(400));
    drain(&mut d);
    assert_eq!(
        d.poll_timeout(),
        Some(t0 + INTERVAL),
        "the sweep comes first"
    );
    d.handle_zre_gone(node(1));
    drain(&mut d);
    assert_eq!(
        d.poll_timeout(),
        Some(t0 + Duration::from_millis(1400)),
        "no peers: the beacon only"
    );
}

#[test]
fn zre_peers_are_never_expired_and_go_when_zre_says() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    d.handle_zre_peer(node(1), &endpoint(9001), t0).unwrap();
    drain(&mut d);
    let later = t0 + 10 * TIMEOUT;
    d.handle_timeout(later);
    assert_eq!(drain(&mut d), [Action::SendBeacon]);
    assert_eq!(d.peers(), 1);
    d.handle_zre_gone(node(1));
    assert_eq!(drain(&mut d), [disconnect(1, 9001, Cause::Gone)]);
    assert_eq!(d.peers(), 0);
    // Gone twice, or never known: nothing.
    d.handle_zre_gone(node(1));
    d.handle_zre_gone(node(7));
    assert!(drain(&mut d).is_empty());
}

#[test]
fn a_tower_beacon_does_not_make_a_zre_peer_expire() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    d.handle_zre_peer(node(1), &endpoint(9001), t0).unwrap();
    d.handle_beacon(node(1), &endpoint(9001), t0).unwrap();
    drain(&mut d);
    d.handle_timeout(t0 + 10 * TIMEOUT);
    assert_eq!(d.peers(), 1);
}

#[test]
fn a_failed_connect_drops_the_peer_and_its_answer() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    let t = t0 + Duration::from_millis(500);
    d.handle_beacon(node(1), &endpoint(9001), t).unwrap();
    assert_eq!(drain(&mut d), [connect(1, 9001)]);
    d.handle_connect_failed(node(1), &endpoint(9001));
    assert_eq!(d.peers(), 0);
    assert_eq!(
        d.poll_timeout(),
        Some(t0 + INTERVAL),
        "a peer not connected is not answered"
    );
    // Its next beacon tries again, as a newcomer.
    d.handle_beacon(node(1), &endpoint(9001), t).unwrap();
    assert_eq!(drain(&mut d), [connect(1, 9001)]);
    assert_eq!(d.peers(), 1);
    assert_eq!(d.poll_timeout(), Some(t));
}

#[test]
fn a_failed_connect_of_a_moved_peer_drops_it() {
    let t0 = Instant::now();
    let mut d = started(config(), t0);
    d.handle_zre_peer(node(1), &endpoint(9001), t0).unwrap();
    d.handle_zre_peer(node(1), &endpoint(9002), t0).unwrap();
    assert_eq!(
        drain(&mut d),
        [
            connect(1, 9001),
            disconnect(1, 9001, Cause::Moved),
            connect(1, 9002)
        ]
    );
    // A stale report (an endpoint the peer left) changes nothing.
    d.handle_connect_failed(node(1), &endpoint(9001));
    assert_eq!(d.peers(), 1);
    d.handle_connect_failed(node(1), &endpoint(9002));
    assert_eq!(d.peers(), 0);
    assert!(drain(&mut d).is_empty());
}
