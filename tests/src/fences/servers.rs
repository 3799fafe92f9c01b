//! The servers the fence target runs against, each started on first use and
//! shared by every case (keys and resources carry a random prefix). They stop
//! when the last case holding them is dropped, at the end of the run. Which
//! servers there are, and how each starts, is the backends' table
//! ([`crate::backends`]).

use crate::{Running, Starting};
use distlock_core::BoxError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::OnceCell;

/// A backend's server that a case needs a URL for, with the query that picks
/// a lock variant (an SQL strategy and its table).
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    /// The backend's registered name.
    pub backend: &'static str,
    /// Starts its server.
    pub launch: fn() -> Starting,
    /// Appended to the server's URL.
    pub query: &'static str,
}

/// Lazily started servers, one per backend.
#[derive(Debug, Default)]
pub struct Servers {
    started: Mutex<HashMap<&'static str, Arc<OnceCell<Running>>>>,
}

impl Servers {
    /// The URL a client of `endpoint` connects with, starting its server first
    /// if needed.
    pub async fn url(&self, endpoint: Endpoint) -> Result<String, BoxError> {
        let cell = self
            .started
            .lock()
            .map_err(|_| "a case panicked while starting a server")?
            .entry(endpoint.backend)
            .or_default()
            .clone();
        let running = cell.get_or_try_init(endpoint.launch).await?;
        Ok(format!("{}{}", running.url, endpoint.query))
    }
}

/// `url` at port 1 of the same host, where nobody listens, without its query:
/// the store's unreachable twin.
pub fn unreachable_twin(url: &str) -> Result<String, BoxError> {
    let url = url.split('?').next().unwrap_or(url);
    let (scheme, rest) = url.split_once("://").ok_or("a URL without ://")?;
    let host_start = rest.rfind('@').map_or(0, |at| at + 1);
    let host_end = rest[host_start..]
        .find('/')
        .map_or(rest.len(), |slash| host_start + slash);
    let host = &rest[host_start..host_end];
    let name = host.rsplit_once(':').map_or(host, |(name, _port)| name);
    Ok(format!(
        "{scheme}://{}{name}:1{}",
        &rest[..host_start],
        &rest[host_end..]
    ))
}

#[cfg(test)]
mod tests {
    use super::unreachable_twin;

    #[test]
    fn the_twin_keeps_credentials_and_database_and_moves_the_port() {
        assert_eq!(
            unreachable_twin("mysql://root:secret@127.0.0.1:40123/distlock?strategy=x").unwrap(),
            "mysql://root:secret@127.0.0.1:1/distlock"
        );
        assert_eq!(
            unreachable_twin("redis://127.0.0.1:6379").unwrap(),
            "redis://127.0.0.1:1"
        );
    }
}
