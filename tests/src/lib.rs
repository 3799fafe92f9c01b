//! The backends the conformance suite runs against: memory always, the others
//! behind a Cargo feature each.

use distlock_testkit::runner::BackendSpec;

pub mod memory;

/// Every enabled backend.
pub fn specs() -> Vec<BackendSpec> {
    #[allow(unused_mut)]
    let mut specs = vec![memory::spec()];
    specs
}
