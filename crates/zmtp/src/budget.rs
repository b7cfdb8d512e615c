//! The memory a peer may make this process hold, and what closes a peer that holds too much.
//!
//! Three bounds, from the narrowest (see `docs/driver.md`, "Memory from strangers"):
//!
//! * per socket, [`Options::recv_limits`](crate::Options::recv_limits): the largest frame and
//!   message a peer may send, checked on the frame header before any body byte is kept;
//! * per connection, [`Options::message_timeout`](crate::Options::message_timeout): a unit
//!   (the greeting, a command, a whole message) whose first byte arrived must be complete in
//!   that time, so a peer that stops in the middle of one does not hold its bytes for ever;
//! * per process, the **budget for unauthenticated peers**: the bytes held in incomplete
//!   frames and messages of every connection whose peer has not authenticated (NULL, PLAIN
//!   towards a server, and every connection until its handshake completes) count against one
//!   shared total; a connection whose bytes would take the total past the budget is closed
//!   (logged, rate-limited), the others keep theirs. Peers that proved who they are (a CURVE
//!   handshake, either role; a PLAIN client our authenticator admitted) are not counted, so
//!   strangers cannot starve an authenticated peer sending large records.
//!
//! The budget is [`DEFAULT_UNAUTHENTICATED_BUDGET`] (64 MiB), or the number of bytes in the
//! environment variable [`UNAUTHENTICATED_BUDGET_ENV`] when the process first needs it, or
//! what [`set_unauthenticated_budget`] says (`0`: no cap).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Default process-wide budget for the bytes held for unauthenticated peers: 64 MiB.
pub const DEFAULT_UNAUTHENTICATED_BUDGET: usize = 64 << 20;

/// The environment variable read (once, when the budget is first needed) for the budget, in
/// bytes; `0` means no cap. An unparsable value is logged and the default used.
pub const UNAUTHENTICATED_BUDGET_ENV: &str = "DAFKA_ZMTP_UNAUTHENTICATED_BUDGET";

/// Bytes held now for unauthenticated peers, process-wide.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// The budget; read from the environment on first use.
fn budget_cell() -> &'static AtomicUsize {
    static BUDGET: OnceLock<AtomicUsize> = OnceLock::new();
    BUDGET.get_or_init(|| {
        let bytes = match std::env::var(UNAUTHENTICATED_BUDGET_ENV) {
            Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                tracing::warn!(
                    value = v,
                    "{UNAUTHENTICATED_BUDGET_ENV} is not a number of bytes: using the default \
                     of {DEFAULT_UNAUTHENTICATED_BUDGET}"
                );
                DEFAULT_UNAUTHENTICATED_BUDGET
            }),
            Err(_) => DEFAULT_UNAUTHENTICATED_BUDGET,
        };
        AtomicUsize::new(bytes)
    })
}

/// Sets the process-wide budget for the bytes held in incomplete frames and messages of
/// unauthenticated peers (see the module documentation); `0` means no cap. Connections that
/// hold more than a lowered budget are closed as their next bytes arrive.
pub fn set_unauthenticated_budget(bytes: usize) {
    budget_cell().store(bytes, Ordering::Relaxed);
}

/// The process-wide budget for unauthenticated peers, in bytes (`0`: no cap).
pub fn unauthenticated_budget() -> usize {
    budget_cell().load(Ordering::Relaxed)
}

/// The bytes held now in incomplete frames and messages of unauthenticated peers, process-wide.
pub fn unauthenticated_held() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// A peer made this process hold memory it may not hold: its connection is closed to free it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryLimit {
    /// A unit (the greeting, a command, a message) that started arriving was not complete
    /// within [`Options::message_timeout`](crate::Options::message_timeout).
    #[error("an incomplete frame or message stopped arriving: not complete within {0:?}")]
    Stalled(Duration),
    /// The bytes this unauthenticated peer holds would take the process past its budget.
    #[error(
        "{held} bytes of incomplete frames and messages would take the unauthenticated peers \
         of this process past their budget of {budget} bytes"
    )]
    UnauthenticatedBudget {
        /// The bytes this connection would hold.
        held: usize,
        /// The process-wide budget.
        budget: usize,
    },
}

/// One connection's share of the budget: the bytes it holds now, counted in the process-wide
/// total until it is dropped (or [`release`](Charge::release)d, once its peer authenticated).
#[derive(Debug, Default)]
pub(crate) struct Charge {
    bytes: usize,
}

impl Charge {
    /// The connection now holds `bytes`: counted, unless the total would pass the budget
    /// (then nothing changes and the connection must close; dropping the charge frees its
    /// share). The growth is added first and taken back when it passes, so the total never
    /// stays above the budget; two connections growing at the same moment may then both be
    /// refused where one alone would have fitted (it errs towards closing a stranger).
    pub(crate) fn hold(&mut self, bytes: usize) -> Result<(), MemoryLimit> {
        if bytes <= self.bytes {
            HELD.fetch_sub(self.bytes - bytes, Ordering::Relaxed);
            self.bytes = bytes;
            return Ok(());
        }
        let more = bytes - self.bytes;
        let budget = unauthenticated_budget();
        let total = HELD.fetch_add(more, Ordering::Relaxed).saturating_add(more);
        if budget != 0 && total > budget {
            HELD.fetch_sub(more, Ordering::Relaxed);
            return Err(MemoryLimit::UnauthenticatedBudget {
                held: bytes,
                budget,
            });
        }
        self.bytes = bytes;
        Ok(())
    }

    /// Stops counting this connection (its peer authenticated).
    pub(crate) fn release(&mut self) {
        let _ = self.hold(0);
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Charges move the shared total, a charge past the budget is refused and leaves the total
    /// as it was, and dropping a charge gives its bytes back. (The only unit test that touches
    /// the process-wide state, with amounts no other test in this binary holds.)
    #[test]
    fn charges_share_one_budget() {
        set_unauthenticated_budget(usize::MAX / 2);
        let base = unauthenticated_held();
        let mut a = Charge::default();
        let mut b = Charge::default();
        a.hold(1000).unwrap();
        b.hold(500).unwrap();
        assert_eq!(unauthenticated_held() - base, 1500);
        a.hold(200).unwrap();
        assert_eq!(unauthenticated_held() - base, 700);
        let over = usize::MAX / 2;
        assert_eq!(
            b.hold(over),
            Err(MemoryLimit::UnauthenticatedBudget {
                held: over,
                budget: usize::MAX / 2
            })
        );
        assert_eq!(
            unauthenticated_held() - base,
            700,
            "a refused charge takes nothing"
        );
        drop(b);
        assert_eq!(unauthenticated_held() - base, 200);
        a.release();
        assert_eq!(unauthenticated_held(), base);
        set_unauthenticated_budget(DEFAULT_UNAUTHENTICATED_BUDGET);
    }
}
