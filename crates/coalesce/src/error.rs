//! What a caller gets back when it did not receive a value, and the per-group error policy.

use std::fmt;
use std::sync::Arc;

/// Why a call to [`Group::run`](crate::Group::run) (or a follower's wait) produced no value.
///
/// `E` is the fill's own error type. It is shared, not cloned: every follower waiting when the
/// fill failed receives the same `Arc<E>`.
#[non_exhaustive]
pub enum FlightError<E> {
    /// The leader's fill returned this error.
    Failed(Arc<E>),
    /// This caller's wait on another caller's fill ran out: it waited longer than the group's
    /// `wait_timeout`. The flight itself goes on and later callers still join it. (Across the
    /// workspace, `WaitTimedOut` is always a wait on someone else's fill; a fill that itself ran
    /// out of time is `FillTimedOut`.)
    WaitTimedOut,
    /// The flight ended without a result and this caller could not take it over: its own fill had
    /// already been handed to a detached task that died (panicked, or its runtime shut down)
    /// before publishing, and no other waiting caller was able to lead.
    Abandoned,
}

impl<E> FlightError<E> {
    /// The fill's error, if this is [`FlightError::Failed`].
    pub fn fill_error(&self) -> Option<&Arc<E>> {
        match self {
            Self::Failed(e) => Some(e),
            _ => None,
        }
    }
}

impl<E> Clone for FlightError<E> {
    fn clone(&self) -> Self {
        match self {
            Self::Failed(e) => Self::Failed(Arc::clone(e)),
            Self::WaitTimedOut => Self::WaitTimedOut,
            Self::Abandoned => Self::Abandoned,
        }
    }
}

impl<E: PartialEq> PartialEq for FlightError<E> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Failed(a), Self::Failed(b)) => a == b,
            (Self::WaitTimedOut, Self::WaitTimedOut) | (Self::Abandoned, Self::Abandoned) => true,
            _ => false,
        }
    }
}

impl<E: fmt::Debug> fmt::Debug for FlightError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed(e) => f.debug_tuple("Failed").field(e).finish(),
            Self::WaitTimedOut => f.write_str("WaitTimedOut"),
            Self::Abandoned => f.write_str("Abandoned"),
        }
    }
}

impl<E: fmt::Display> fmt::Display for FlightError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed(e) => write!(f, "the fill failed: {e}"),
            Self::WaitTimedOut => f.write_str("timed out waiting for another caller's fill"),
            Self::Abandoned => {
                f.write_str("the fill was abandoned before publishing and could not be taken over")
            }
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for FlightError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Failed(e) => Some(&**e),
            _ => None,
        }
    }
}

/// What a group does when a leader's fill returns an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ErrorPolicy {
    /// Share the error (as `Arc<E>`) with every follower waiting at that moment, then end the
    /// flight so the next caller starts a fresh fill. Right when errors are cheap to produce and
    /// expensive to retry in a burst (a backend that is down).
    #[default]
    Share,
    /// The failed leader gets its own error; the flight is handed to the next waiting follower,
    /// which retries with its own fill. Right when errors are transient and per-attempt.
    HandOff,
}
