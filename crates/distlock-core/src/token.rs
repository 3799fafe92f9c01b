//! Fencing tokens.

/// A number that strictly increases with each new holder of one key.
///
/// Hand it to the protected resource with every write; the resource rejects writes
/// carrying a token lower than one it has seen (see [`crate::Fence`]). Tokens of
/// different keys are not comparable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token value.
    pub const fn new(value: u64) -> Self {
        FencingToken(value)
    }

    /// The raw value, for storing next to the protected data.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl From<FencingToken> for u64 {
    fn from(t: FencingToken) -> u64 {
        t.0
    }
}
