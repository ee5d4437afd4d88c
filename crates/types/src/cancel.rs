//! A caller's cancellation of a call.

use std::sync::Arc;

/// A caller's cancellation of one call: a flag, and what to wake when it
/// is set. Cheap to clone; every clone is the same cancellation.
#[derive(Clone, Default)]
pub struct Cancel(Arc<CancelState>);

#[derive(Default)]
struct CancelState {
    cancelled: std::sync::atomic::AtomicBool,
    wakers: std::sync::Mutex<Vec<Box<dyn FnOnce() + Send>>>,
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel").field("cancelled", &self.is_cancelled()).finish()
    }
}

impl Cancel {
    /// Cancels the call: runs what [`Cancel::on_cancel`] registered, once.
    pub fn cancel(&self) {
        if self.0.cancelled.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let wakers = std::mem::take(&mut *self.0.wakers.lock().unwrap_or_else(|p| p.into_inner()));
        for wake in wakers {
            wake();
        }
    }

    /// Whether the caller gave up.
    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs `wake` when the call is cancelled (at once if it already is).
    pub fn on_cancel(&self, wake: impl FnOnce() + Send + 'static) {
        let mut wakers = self.0.wakers.lock().unwrap_or_else(|p| p.into_inner());
        if self.is_cancelled() {
            drop(wakers);
            wake();
            return;
        }
        wakers.push(Box::new(wake));
    }
}
