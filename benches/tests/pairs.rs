//! End to end: both sides of each test as separate `dafka-bench` processes over loopback,
//! for every backend this build offers, with small counts.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_dafka-bench");

fn spawn(role: &str, backend: &str, port: u16, size: usize, count: u64) -> Child {
    Command::new(BIN)
        .args([
            role,
            "--impl",
            backend,
            "--endpoint",
            &format!("tcp://127.0.0.1:{port}"),
            "--size",
            &size.to_string(),
            "--count",
            &count.to_string(),
            "--warmup",
            "10",
            "--timeout",
            "20",
            "--hold",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for `measuring` to finish, then releases `other` by closing its stdin.
fn finish(measuring: Child, mut other: Child) -> (String, String) {
    let out = measuring.wait_with_output().unwrap();
    drop(other.stdin.take());
    let other_out = other.wait_with_output().unwrap();
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(other_out.stdout).unwrap(),
    )
}

fn backends() -> Vec<String> {
    let out = Command::new(BIN).arg("info").output().unwrap();
    let line = String::from_utf8(out.stdout).unwrap();
    let start = line.find("\"backends\":\"").unwrap() + "\"backends\":\"".len();
    let end = start + line[start..].find('"').unwrap();
    line[start..end].split(',').map(str::to_owned).collect()
}

#[test]
fn push_pull_moves_every_message_for_every_backend() {
    for backend in backends() {
        for size in [16usize, 300, 70_000] {
            let port = dafka_testkit::free_tcp_port();
            let pull = spawn("pull", &backend, port, size, 500);
            let push = spawn("push", &backend, port, size, 500);
            let (pulled, pushed) = finish(pull, push);
            assert!(pulled.contains("\"ok\":true"), "{backend} {size}: {pulled}");
            assert!(
                pulled.contains("\"received\":510"),
                "{backend} {size}: {pulled}"
            );
            assert!(pulled.contains("\"mb_per_s\":"), "{pulled}");
            assert!(pushed.contains("\"ok\":true"), "{backend} {size}: {pushed}");
            assert!(pushed.contains("\"hold_released\":true"), "{pushed}");
        }
    }
}

#[test]
fn req_rep_measures_round_trips_for_every_backend() {
    for backend in backends() {
        let port = dafka_testkit::free_tcp_port();
        let rep = spawn("rep", &backend, port, 64, 200);
        let req = spawn("req", &backend, port, 64, 200);
        let (requested, replied) = finish(req, rep);
        assert!(requested.contains("\"ok\":true"), "{backend}: {requested}");
        assert!(requested.contains("\"p99_us\":"), "{requested}");
        assert!(replied.contains("\"echoed\":210"), "{backend}: {replied}");
    }
}

#[test]
fn a_lone_receiver_times_out_and_reports_it() {
    let port = dafka_testkit::free_tcp_port();
    let started = Instant::now();
    let out = Command::new(BIN)
        .args(["pull", "--impl", "raw", "--endpoint"])
        .arg(format!("tcp://127.0.0.1:{port}"))
        .args(["--size", "16", "--count", "10", "--timeout", "0.5"])
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1));
    let line = String::from_utf8(out.stdout).unwrap();
    assert!(
        line.contains("\"ok\":false") && line.contains("timed out"),
        "{line}"
    );
}

/// Starts `peer_role` (which binds), then `role` against it with a 2 s timeout, kills the
/// peer, and expects `role` to give up by itself, with a failure, well within 10 s.
fn exits_when_peer_dies(peer_role: &str, role: &str, size: usize) {
    for backend in backends() {
        let port = dafka_testkit::free_tcp_port();
        let mut peer = spawn(peer_role, &backend, port, size, 100_000_000);
        let mut side = Command::new(BIN)
            .args([role, "--impl", &backend, "--endpoint"])
            .arg(format!("tcp://127.0.0.1:{port}"))
            .args([
                "--size",
                &size.to_string(),
                "--count",
                "100000000",
                "--timeout",
                "2",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        peer.kill().unwrap();
        let _ = peer.wait();
        let started = Instant::now();
        let status = side.wait().unwrap();
        assert!(started.elapsed() < Duration::from_secs(10), "{backend}");
        assert!(!status.success(), "{backend}");
    }
}

#[test]
fn a_sender_whose_peer_dies_exits_by_itself() {
    exits_when_peer_dies("pull", "push", 1024);
}

#[test]
fn a_requester_whose_replier_dies_exits_by_itself() {
    exits_when_peer_dies("rep", "req", 64);
}

#[test]
fn unknown_backend_is_reported_as_unavailable() {
    let out = spawn(
        "pull",
        "no-such-backend",
        dafka_testkit::free_tcp_port(),
        16,
        1,
    )
    .wait_with_output()
    .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .contains("not available")
    );
}
