//! The conformance cases, as plain `pub async fn`s over a [`Harness`]. Each
//! case's name is the property it checks; each runs on every backend whose
//! [`Capabilities`] and [`Hooks`] allow it, and is reported as ignored (with the
//! reason) where they do not.
//!
//! | # | case | property |
//! |---|---|---|
//! | 1 | [`acquire_release_basic`] | a free lock is acquired with a token, released, re-acquired |
//! | 2 | [`try_acquire_when_held_returns_none`] | fails fast, leaves nothing behind |
//! | 3 | [`names_are_independent`] | `a`, `A`, `a/b`, `ab`, `a/`, `{x}`, `%2F`, unicode: all independent |
//! | 4 | [`invalid_input_rejected`] | empty key, NUL, over-long key, zero ttl, sub-minimum ttl: clear errors |
//! | 5 | [`mutual_exclusion_under_contention`] | K clients × M rounds: the in-section counter never exceeds 1, no lost update |
//! | 6 | [`fencing_tokens_strictly_increase`] | across holders, including after a ttl takeover |
//! | 7 | [`fence_rejects_stale_holder`] | a paused holder's late write is refused by a `Fence` |
//! | 8 | [`release_by_non_owner_is_noop`] | a stale or foreign lease can neither release nor renew another's lock |
//! | 9 | [`stale_release_after_takeover_is_noop`] | A expires, B acquires, A's release leaves B's lock intact |
//! | 10 | [`double_release_is_safe`] | a second release gives a defined error, never frees another holder |
//! | 11 | [`ttl_expiry_frees_lock_after_crash`] | a holder vanishes without release; the next acquire gets in within ttl + slack |
//! | 12 | [`renewal_keeps_lock_past_ttl`] | an auto-renewed lease is held ≥ 3 × ttl, contenders blocked throughout |
//! | 13 | [`manual_renewal_and_expiry`] | with `Renewal::Manual` the lease ends at ttl unless renewed |
//! | 14 | [`lost_signal_on_external_deletion`] | an operator deletes the key: `lost()` fires, `is_held()` is false |
//! | 15 | [`lost_signal_on_partition`] | backend unreachable: `lost()` fires by the local deadline, before server expiry |
//! | 16 | [`no_lost_signal_on_release`] | a normal release or drop never fires `lost()` |
//! | 17 | [`acquire_never_returns_expired_lease`] | replies delayed past the ttl give `Timeout`, not a dead lease |
//! | 18 | [`waiter_wakes_promptly`] | hand-off after release within the backend's bound (push: no poll sleep) |
//! | 19 | [`cancelled_wait_leaves_no_orphan`] | a dropped or timed-out acquire leaves no residue and delays nobody |
//! | 20 | [`waiter_session_expiry_is_an_error`] | a queued waiter cut off from the backend ends with an error, never the lock |
//! | 21 | [`expired_waiter_ahead_does_not_skip_holder`] | a waiter ahead dying does not grant the lock while it is held |
//! | 22 | [`fifo_order`] | where capabilities say FIFO, waiters acquire in arrival order |
//! | 23 | [`wait_timeout_honoured`] | a bounded wait returns within its timeout ± a small ε, with no residue |
//! | 24 | [`drop_releases`] | dropping the lease (also on panic) frees the lock promptly |
//! | 25 | [`reentrant_same_owner`] | same owner: same token, freed after the last release; no owner: waits |
//! | 26 | [`max_hold_ends_lease`] | `max_hold` reached: the lease is lost and released |
//! | 27 | [`token_survives_server_restart`] | durable backends: tokens keep rising after a clean restart |
//! | 28 | [`many_keys_many_clients`] | 10k cycles over 64 keys from 16 clients: zero violations, zero residue |
//! | 29 | [`with_lock_releases_and_returns_the_work_result`] | `with_lock` holds during the work, returns its value or its own error, frees the lock |
//! | 30 | [`with_lock_stops_work_on_loss`] | an operator deletes the lock: the work is dropped, `with_lock` gives `Lost` |
//! | 31 | [`multi_lock_is_all_or_nothing`] | `acquire_all` with one key held fails `Busy` holding none; then takes each key once, in order |
//! | 32 | [`multi_lock_wait_is_one_budget`] | `Wait::For(d)` bounds the whole set, not each key |
//! | 33 | [`multi_lock_opposite_orders_do_not_deadlock`] | `{a, b}` and `{b, a}` taken over and over by two clients: every round completes |
//! | 34 | [`cancelled_multi_lock_leaves_nothing`] | a dropped or aborted `acquire_all` frees what it took at once and delays nobody |
//! | 35 | [`holder_metadata_is_shown`] | the holder's host, pid and label are stored with the lock: `Inspect::holder` and the `Busy` error name them; a bad label is refused |
//!
//! Semaphores and elections, where [`Capabilities::primitives`] offers them:
//!
//! | case | property |
//! |---|---|
//! | [`semaphore_acquire_release_basic`] | `limit` permits with slots `0..limit`, one more refused, a freed slot reused with a higher token, bad limits refused |
//! | [`semaphore_limit_never_exceeded_under_contention`] | K clients × M rounds: an in-test counter never exceeds the limit, live slots never collide |
//! | [`semaphore_limit_mismatch_is_an_error`] | another limit while permits are held gives `LimitMismatch` |
//! | [`semaphore_waiter_wakes_promptly`] | a release hands the freed slot to a waiter within the backend's bound |
//! | [`semaphore_cancelled_wait_leaves_no_residue`] | dropped, aborted and timed-out waits leave no permit or queue entry |
//! | [`semaphore_crashed_holder_frees_after_ttl`] | a crashed holder's permit frees at its ttl and its slot is reused |
//! | [`semaphore_lost_on_external_deletion`] | an operator deletes a permit: `lost()` fires, its release gives `Lost` |
//! | [`semaphore_lost_on_partition`] | backend unreachable: `lost()` by the local deadline, before another client gets the slot |
//! | [`election_one_leader_at_a_time`] | resigning, killed and paused leaders: never two at once over the recorded history, terms rise |
//! | [`election_terms_strictly_rise`] | successive terms rise; observers see the leader and its term |
//! | [`election_paused_leader_write_refused_by_fence`] | a deposed leader's late write is refused by a fence |
//! | [`election_cancelled_campaign_delays_nobody`] | cancelled and timed-out campaigns delay nobody |
//! | [`election_observe_sees_changes`] | an observer sees vacant, A, vacant, B, vacant in order, each within the hand-off bound, nothing repeated |
//! | [`election_observe_sees_a_lost_leader`] | a leader killed without resigning is seen gone by its ttl plus the hand-off bound |
//!
//! Read-write locks, where [`Capabilities::primitives`] offers them:
//!
//! | case | property |
//! |---|---|
//! | [`rwlock_readers_share`] | readers on three clients hold at once; a writer waits for them, then excludes readers and writers, with a higher token; the plain lock of the name is independent |
//! | [`rwlock_writer_excludes_under_contention`] | K clients × M rounds of reads and writes: in-test counters never see a writer with anyone; write tokens rise |
//! | [`rwlock_nobody_starved`] | a waiting writer is served before later readers; a writer gets in amid a steady stream of readers, and a reader amid a steady stream of writers |
//! | [`rwlock_crashed_shares_free_after_ttl`] | a crashed reader's share and a crashed writer's lock free at their ttl |
//! | [`rwlock_cancelled_wait_leaves_no_residue`] | dropped, aborted and timed-out reads and writes leave nothing and delay nobody |
//! | [`rwlock_lost_on_external_deletion`] | an operator deletes the shares: `lost()` fires for readers and writers, stale releases give `Lost` |
//!
//! The minimum hold ([`AcquireOptions::min_hold`](distlock_core::AcquireOptions::min_hold)),
//! where [`Capabilities::min_hold`] offers it, and its refusal where it does not:
//!
//! | case | property |
//! |---|---|
//! | [`min_hold_outlasts_an_early_release`] | released at once, the lock (and a semaphore's permit) stays held until `min_hold`, then frees long before the ttl, with a higher token |
//! | [`min_hold_outlasts_a_killed_holder`] | a holder process killed (SIGKILL) a ttl after acquiring blocks others until `min_hold`, far past its ttl, then the lock frees by itself |
//! | [`min_hold_refused_with_the_reason`] | a backend that cannot keep a lock past its holder refuses `min_hold` with its reason and takes nothing |
//!
//! Bounded state, where [`Capabilities::state_collection`] offers it (the
//! harness gives clients with a short `state_ttl`,
//! [`Harness::client_with_state_ttl`], and the inspector counts the records,
//! [`Inspect::state_records`](distlock_core::toolkit::Inspect::state_records)):
//!
//! | case | property |
//! |---|---|
//! | [`state_is_collected`] | 200 names, each used once as every primitive offered: no per-name record left `state_ttl` after their leases |
//! | [`token_rises_after_state_collected`] | a name used again after its state was collected gets tokens above all its earlier ones |
//!
//! The fault hooks a case needs come from the harness: deleting a holder and
//! counting residue go through the adapter's own
//! [`Inspect`](distlock_core::toolkit::Inspect) implementation
//! ([`Harness::inspector`]); partitions and delays through the TCP fault proxy;
//! restarts through the launcher.

mod basic;
mod election;
mod exclusion;
mod expiry;
mod loss;
mod min_hold;
mod multi;
mod observe;
mod rwlock;
mod rwlock_loss;
mod scope;
mod semaphore;
mod semaphore_loss;
mod state;
mod waiting;

pub use basic::*;
pub use election::*;
pub use exclusion::*;
pub use expiry::*;
pub use loss::*;
pub use min_hold::*;
pub use multi::*;
pub use observe::*;
pub use rwlock::*;
pub use rwlock_loss::*;
pub use scope::{Scope, still_pending, within};
pub use semaphore::*;
pub use semaphore_loss::*;
pub use state::*;
pub use waiting::*;

use crate::harness::{Harness, Hooks};
use distlock_core::Capabilities;
use std::future::Future;
use std::pin::Pin;

/// The outcome of a case.
pub type CaseResult = Result<(), CaseError>;

/// Why a case failed. Any displayable error converts into it, so cases use `?`.
#[derive(Debug)]
pub struct CaseError(String);

impl CaseError {
    /// A failure with this message.
    pub fn msg(message: impl Into<String>) -> Self {
        CaseError(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl<E: std::fmt::Display> From<E> for CaseError {
    fn from(e: E) -> Self {
        CaseError(e.to_string())
    }
}

/// Fails the case with a formatted message unless the condition holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err($crate::cases::CaseError::msg(format!($($fmt)+)));
        }
    };
}
pub use ensure;

/// A case as the runner sees it.
pub type CaseFn =
    for<'a> fn(&'a dyn Harness) -> Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

/// One conformance case.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    /// The property, used as the test name.
    pub name: &'static str,
    /// Runs the case.
    pub run: CaseFn,
    /// Why the case cannot run on a backend, if it cannot.
    pub needs: fn(&Capabilities, &Hooks) -> Option<&'static str>,
}

fn always(_: &Capabilities, _: &Hooks) -> Option<&'static str> {
    None
}

fn semaphore(c: &Capabilities, _: &Hooks) -> Option<&'static str> {
    c.primitives.semaphore.why_not()
}

fn election(c: &Capabilities, _: &Hooks) -> Option<&'static str> {
    c.primitives.election.why_not()
}

fn rwlock(c: &Capabilities, _: &Hooks) -> Option<&'static str> {
    c.primitives.rwlock.why_not()
}

fn min_hold(c: &Capabilities, _: &Hooks) -> Option<&'static str> {
    c.min_hold.why_not()
}

/// The gate of the bounded-state cases: a backend claims collection of idle
/// state in its capabilities once it does it (issue 28, backend by backend).
fn state_collection(c: &Capabilities, _: &Hooks) -> Option<&'static str> {
    c.state_collection.why_not()
}

macro_rules! case {
    ($name:ident) => {
        case!($name, always)
    };
    ($name:ident, $needs:expr) => {
        Case {
            name: stringify!($name),
            run: |h| Box::pin($name(h)),
            needs: $needs,
        }
    };
}

/// Every case, in the order of the table above.
pub fn all() -> Vec<Case> {
    vec![
        case!(acquire_release_basic),
        case!(try_acquire_when_held_returns_none),
        case!(names_are_independent),
        case!(invalid_input_rejected),
        case!(mutual_exclusion_under_contention),
        case!(fencing_tokens_strictly_increase),
        case!(fence_rejects_stale_holder),
        case!(release_by_non_owner_is_noop, |_, h| (!h.delete_lock)
            .then_some("needs delete_lock")),
        case!(stale_release_after_takeover_is_noop),
        case!(double_release_is_safe),
        case!(ttl_expiry_frees_lock_after_crash),
        case!(renewal_keeps_lock_past_ttl),
        case!(manual_renewal_and_expiry),
        case!(lost_signal_on_external_deletion, |_, h| (!h.delete_lock)
            .then_some("needs delete_lock")),
        case!(lost_signal_on_partition, |_, h| (!h.faulty_client)
            .then_some("needs faulty_client")),
        case!(no_lost_signal_on_release),
        case!(acquire_never_returns_expired_lease, |_, h| (!h
            .faulty_client)
            .then_some("needs faulty_client")),
        case!(waiter_wakes_promptly),
        case!(cancelled_wait_leaves_no_orphan),
        case!(waiter_session_expiry_is_an_error, |_, h| (!h.faulty_client)
            .then_some("needs faulty_client")),
        case!(expired_waiter_ahead_does_not_skip_holder),
        case!(fifo_order, |c, h| {
            if !c.fifo {
                Some("backend is not FIFO")
            } else if !h.residue {
                Some("needs residue to see the queue")
            } else {
                None
            }
        }),
        case!(wait_timeout_honoured),
        case!(drop_releases),
        case!(reentrant_same_owner),
        case!(max_hold_ends_lease),
        case!(token_survives_server_restart, |c, h| {
            if !h.restart {
                Some("needs restart")
            } else if c.token_durability == distlock_core::TokenDurability::Volatile {
                Some("tokens are volatile across restarts")
            } else {
                None
            }
        }),
        case!(many_keys_many_clients),
        case!(with_lock_releases_and_returns_the_work_result),
        case!(with_lock_stops_work_on_loss, |_, h| (!h.delete_lock)
            .then_some("needs delete_lock")),
        case!(multi_lock_is_all_or_nothing),
        case!(multi_lock_wait_is_one_budget),
        case!(multi_lock_opposite_orders_do_not_deadlock),
        case!(cancelled_multi_lock_leaves_nothing, |_, h| (!h.residue)
            .then_some("needs residue and the inspector")),
        case!(holder_metadata_is_shown),
        case!(semaphore_acquire_release_basic, semaphore),
        case!(semaphore_limit_never_exceeded_under_contention, semaphore),
        case!(semaphore_limit_mismatch_is_an_error, semaphore),
        case!(semaphore_waiter_wakes_promptly, semaphore),
        case!(semaphore_cancelled_wait_leaves_no_residue, semaphore),
        case!(semaphore_crashed_holder_frees_after_ttl, semaphore),
        case!(semaphore_lost_on_external_deletion, semaphore),
        case!(semaphore_lost_on_partition, |c, h| semaphore(c, h)
            .or((!h.faulty_client).then_some("needs faulty_client"))),
        case!(election_one_leader_at_a_time, election),
        case!(election_terms_strictly_rise, election),
        case!(election_paused_leader_write_refused_by_fence, election),
        case!(election_cancelled_campaign_delays_nobody, election),
        case!(election_observe_sees_changes, election),
        case!(election_observe_sees_a_lost_leader, election),
        case!(rwlock_readers_share, rwlock),
        case!(rwlock_writer_excludes_under_contention, rwlock),
        case!(rwlock_nobody_starved, rwlock),
        case!(rwlock_crashed_shares_free_after_ttl, rwlock),
        case!(rwlock_cancelled_wait_leaves_no_residue, rwlock),
        case!(rwlock_lost_on_external_deletion, rwlock),
        case!(min_hold_outlasts_an_early_release, min_hold),
        case!(min_hold_outlasts_a_killed_holder, |c, h| min_hold(c, h)
            .or((!h.holder_process).then_some("needs holder_process"))),
        case!(min_hold_refused_with_the_reason, |c, _| c
            .min_hold
            .is_offered()
            .then_some("the backend keeps a min_hold")),
        case!(state_is_collected, state_collection),
        case!(token_rises_after_state_collected, state_collection),
    ]
}
