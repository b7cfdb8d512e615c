//! A forked child does not inherit the parent's inproc names. Its own test
//! binary: `fork` copies only the calling thread, so no other test may hold
//! a lock at that moment.

use dafka_zmtp::{Options, Socket, SocketType};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn forked_child_can_bind_an_inproc_name_its_parent_holds() {
    const NAME: &str = "inproc://fork-test";
    let rt = runtime();
    let parent = rt.block_on(async {
        let s = Socket::new(SocketType::Pair, Options::default()).unwrap();
        s.bind(NAME).await.unwrap();
        s
    });
    // SAFETY: this binary runs this one test; a current-thread runtime
    // spawns no threads, so the child is a consistent copy of this thread.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // Child: a fresh runtime; exit without unwinding or running the
        // parent's destructors.
        let ok = std::panic::catch_unwind(|| {
            runtime().block_on(async {
                let s = Socket::new(SocketType::Pair, Options::default()).unwrap();
                s.bind(NAME).await.is_ok()
            })
        })
        .unwrap_or(false);
        // SAFETY: _exit ends the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child could not bind {NAME} (status {status:#x})"
    );
    // The parent's name is untouched.
    rt.block_on(async {
        let other = Socket::new(SocketType::Pair, Options::default()).unwrap();
        assert!(other.bind(NAME).await.is_err());
        drop(parent);
    });
}
