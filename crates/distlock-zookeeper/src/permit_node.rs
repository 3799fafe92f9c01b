//! What a permit node (a "lease" under `leases/` in Curator's layout) records:
//! its slot and the semaphore's limit, in two places Curator ignores:
//!
//! - its data, `distlock slot={slot} limit={limit}`, for operators (`get` in
//!   `zkCli.sh`) and inspection;
//! - its protected-mode uuid, `d1571c4e-{slot:04x}-8{limit-1:03x}-{random}`
//!   (a version-8 uuid with a fixed first group), so one listing of the
//!   leases tells every distlock permit's slot and limit without reading each
//!   node. That keeps the guard lock's critical section to one read and one
//!   write: grants of a semaphore are serialized through its guard, so every
//!   request in it limits how many permits can be handed out per second.
//!
//! Curator's own leases carry a random (version 4) uuid and their client's
//! address as data: neither parses, so they count against the limit but hold
//! no slot.

use uuid::Uuid;

/// The first group of every permit uuid.
const SIGNATURE: u32 = 0xd157_1c4e;

/// The uuid of a permit in `slot` of a semaphore of `limit` (1 to 4096),
/// random in its last 62 bits so that every acquisition's marker is its own.
pub fn permit_uuid(slot: u32, limit: u32) -> Uuid {
    let random = Uuid::new_v4();
    let mut tail = [0u8; 8];
    tail.copy_from_slice(&random.as_bytes()[8..]);
    // RFC 9562 variant bits, as every uuid has them.
    tail[0] = (tail[0] & 0x3f) | 0x80;
    let slot = u16::try_from(slot).unwrap_or(u16::MAX);
    let limit = u16::try_from(limit.saturating_sub(1) & 0xfff).unwrap_or(0);
    Uuid::from_fields(SIGNATURE, slot, 0x8000 | limit, &tail)
}

/// The slot and limit of a lease node named `_c_{permit uuid}-lease-{seq}`;
/// `None` for any other name (a Curator lease).
pub fn parse_permit_name(name: &str) -> Option<(u32, u32)> {
    let text = name
        .strip_prefix(crate::keys::PROTECTED_PREFIX)?
        .get(..36)?;
    let uuid = Uuid::try_parse(text).ok()?;
    let (first, slot, version_limit, _) = uuid.as_fields();
    if first != SIGNATURE || version_limit >> 12 != 8 {
        return None;
    }
    Some((u32::from(slot), u32::from(version_limit & 0xfff) + 1))
}

/// A permit's node data: its slot and the semaphore's limit.
pub fn permit_data(slot: u32, limit: u32) -> String {
    format!("distlock slot={slot} limit={limit}")
}

/// The slot and limit of a permit's node data; `None` for data distlock did
/// not write (a Curator lease).
pub fn parse_permit_data(data: &[u8]) -> Option<(u32, u32)> {
    let text = std::str::from_utf8(data).ok()?;
    let rest = text.strip_prefix("distlock slot=")?;
    let (slot, limit) = rest.split_once(" limit=")?;
    Some((slot.parse().ok()?, limit.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;

    #[test]
    fn slot_and_limit_round_trip_through_the_name() {
        for (slot, limit) in [(0, 1), (3, 5), (4095, 4096), (17, 4096)] {
            let uuid = permit_uuid(slot, limit);
            let name = format!("{}lease-0000000042", keys::protected_marker(&uuid));
            assert_eq!(parse_permit_name(&name), Some((slot, limit)), "{name}");
            assert_ne!(permit_uuid(slot, limit), uuid, "markers are unique");
        }
    }

    #[test]
    fn curator_leases_hold_no_slot() {
        let curator = format!(
            "{}lease-0000000001",
            keys::protected_marker(&Uuid::new_v4())
        );
        assert_eq!(parse_permit_name(&curator), None);
        assert_eq!(parse_permit_name("lease-0000000001"), None);
        assert_eq!(parse_permit_name("_c_d1571c4e"), None);
        assert_eq!(parse_permit_data(b"127.0.1.1"), None);
        assert_eq!(parse_permit_data(b"distlock slot=x limit=2"), None);
        assert_eq!(parse_permit_data(&[0xff, 0xfe]), None);
    }

    #[test]
    fn data_round_trips() {
        assert_eq!(
            parse_permit_data(permit_data(3, 5).as_bytes()),
            Some((3, 5))
        );
    }
}
