//! What the relay holds unsent: each side's queue of one session, counted
//! against `voice.max_buffered_bytes`; an agent's sessions together,
//! against its share of the total (as many sessions' worth as its share of
//! `voice.max_sessions`); and every queue together, counted against
//! `voice.max_buffered_total_bytes`. One agent's sessions that stop
//! reading cannot fill the total and get other agents' sessions closed.
//!
//! A message costs its payload and [`FRAME_COST`] more: an empty frame
//! still takes a queue slot and a message header, so a flood of empty or
//! one-byte frames reaches the bound as surely as a flood of large ones
//! (before, 47 million empty frames queued for an upstream that did not
//! read counted 0 bytes and held 2.9 GB).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::mpsc;

/// What one queued message costs beyond its payload: its slot in the
/// queue and its header (about 70 bytes measured on x86-64 for the relay's
/// message types, and a small allocation for a short payload), rounded up.
pub(super) const FRAME_COST: usize = 128;

/// The bytes a set of queues holds together: every session's (the relay's
/// total), or one agent's sessions' (its share of the total, whose own
/// [`Total`] is the relay's).
#[derive(Debug)]
pub(super) struct Total {
    held: AtomicUsize,
    max: usize,
    /// The total this one is a share of.
    within: Option<Arc<Total>>,
}

impl Total {
    pub(super) fn new(max: usize) -> Total {
        Total { held: AtomicUsize::new(0), max, within: None }
    }

    /// A share of at most `max` of `total`.
    pub(super) fn share(max: usize, total: &Arc<Total>) -> Total {
        Total { held: AtomicUsize::new(0), max, within: Some(total.clone()) }
    }

    /// The most the queues may hold, in cost bytes.
    pub(super) fn max(&self) -> usize {
        self.max
    }

    /// What the queues hold now, in cost bytes.
    pub(super) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// Takes `cost` here and in the totals this is a share of; an error
    /// says which would pass its bound (nothing is taken then).
    fn charge(&self, cost: usize) -> Result<(), Full> {
        if self.held.fetch_add(cost, Ordering::AcqRel) + cost > self.max {
            self.held.fetch_sub(cost, Ordering::AcqRel);
            return Err(if self.within.is_some() { Full::Agent } else { Full::Total });
        }
        if let Some(total) = &self.within
            && let Err(full) = total.charge(cost)
        {
            self.held.fetch_sub(cost, Ordering::AcqRel);
            return Err(full);
        }
        Ok(())
    }

    /// Gives `cost` back here and in the totals this is a share of.
    fn credit(&self, cost: usize) {
        self.held.fetch_sub(cost, Ordering::AcqRel);
        if let Some(total) = &self.within {
            total.credit(cost);
        }
    }
}

/// Which bound a message would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    /// This side of this session (`voice.max_buffered_bytes`).
    Session,
    /// The agent's sessions together (its share of
    /// `voice.max_buffered_total_bytes`).
    Agent,
    /// Every session together (`voice.max_buffered_total_bytes`).
    Total,
    /// The side's writer is gone.
    Gone,
}

/// One side's account: what its queue holds, also counted in the total.
/// When its last holder drops it (the queue and its writer gone), what was
/// still queued is given back to the total.
#[derive(Debug)]
struct Account {
    held: AtomicUsize,
    max: usize,
    total: Arc<Total>,
}

impl Account {
    fn charge(&self, cost: usize) -> Result<(), Full> {
        if self.held.fetch_add(cost, Ordering::AcqRel) + cost > self.max {
            self.held.fetch_sub(cost, Ordering::AcqRel);
            return Err(Full::Session);
        }
        if let Err(full) = self.total.charge(cost) {
            self.held.fetch_sub(cost, Ordering::AcqRel);
            return Err(full);
        }
        Ok(())
    }

    fn credit(&self, cost: usize) {
        self.held.fetch_sub(cost, Ordering::AcqRel);
        self.total.credit(cost);
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        self.total.credit(*self.held.get_mut());
    }
}

/// The queue of messages to one side, bounded by their cost.
pub(super) struct Outbox<T> {
    tx: mpsc::UnboundedSender<T>,
    account: Arc<Account>,
}

/// The writer's end of an [`Outbox`].
pub(super) struct Inbox<T> {
    rx: mpsc::UnboundedReceiver<T>,
    account: Arc<Account>,
}

/// A queue to one side holding at most `max` cost bytes, and at most what
/// `total` leaves.
pub(super) fn outbox<T>(max: usize, total: &Arc<Total>) -> (Outbox<T>, Inbox<T>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let account = Arc::new(Account { held: AtomicUsize::new(0), max, total: total.clone() });
    (Outbox { tx, account: account.clone() }, Inbox { rx, account })
}

impl<T> Outbox<T> {
    /// Queues `message` of `len` payload bytes; an error says which bound
    /// it would pass (nothing is queued then).
    pub(super) fn push(&self, message: T, len: usize) -> Result<(), Full> {
        let cost = len.saturating_add(FRAME_COST);
        self.account.charge(cost)?;
        if self.tx.send(message).is_err() {
            self.account.credit(cost);
            return Err(Full::Gone);
        }
        Ok(())
    }

    /// Queues `message` outside the bound (the session's own last word:
    /// its close).
    pub(super) fn push_last(&self, message: T) {
        let _ = self.tx.send(message);
    }
}

impl<T> Inbox<T> {
    /// The next message, as pushed; [`Inbox::sent`] its `len` once written.
    pub(super) async fn recv(&mut self) -> Option<T> {
        self.rx.recv().await
    }

    /// A message of `len` payload bytes was written: its cost is free again.
    pub(super) fn sent(&self, len: usize) {
        self.account.credit(len.saturating_add(FRAME_COST));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_messages_cost_and_the_total_bounds_every_queue_and_gets_back_what_a_closed_queue_held() {
        let total = Arc::new(Total::new(10 * FRAME_COST));
        let (a, a_in) = outbox::<()>(6 * FRAME_COST, &total);
        let (b, _b_in) = outbox::<()>(6 * FRAME_COST, &total);
        for _ in 0..6 {
            a.push((), 0).unwrap();
        }
        assert_eq!(a.push((), 0), Err(Full::Session), "empty messages are not free");
        for _ in 0..4 {
            b.push((), 0).unwrap();
        }
        assert_eq!(b.push((), 0), Err(Full::Total));
        assert_eq!(total.held(), 10 * FRAME_COST);
        a_in.sent(0);
        b.push((), 0).unwrap();
        // A queue dropped with messages in it gives them back.
        drop((a, a_in));
        assert_eq!(total.held(), 5 * FRAME_COST);
    }

    #[test]
    fn one_agents_sessions_fill_only_its_share_and_give_it_back() {
        let total = Arc::new(Total::new(10 * FRAME_COST));
        let (greedy, other) =
            (Arc::new(Total::share(4 * FRAME_COST, &total)), Arc::new(Total::share(4 * FRAME_COST, &total)));
        // Two sessions of the greedy agent, each within its own bound.
        let (g1, g1_in) = outbox::<()>(3 * FRAME_COST, &greedy);
        let (g2, _g2_in) = outbox::<()>(3 * FRAME_COST, &greedy);
        for _ in 0..3 {
            g1.push((), 0).unwrap();
        }
        g2.push((), 0).unwrap();
        assert_eq!(g2.push((), 0), Err(Full::Agent), "the agent's share is full, not the relay");
        // Another agent still has all of its own share.
        let (o, _o_in) = outbox::<()>(6 * FRAME_COST, &other);
        for _ in 0..4 {
            o.push((), 0).unwrap();
        }
        assert_eq!(o.push((), 0), Err(Full::Agent));
        assert_eq!(total.held(), 8 * FRAME_COST);
        // A session that ends gives back to its agent and to the relay.
        drop((g1, g1_in));
        assert_eq!((greedy.held(), total.held()), (FRAME_COST, 5 * FRAME_COST));
    }
}
