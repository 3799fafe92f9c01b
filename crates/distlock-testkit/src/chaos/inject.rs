//! Faults on a harness's servers and faulty clients.
//!
//! The driver asks an [`Injector`] for one fault at a time; each call applies
//! the fault, keeps it for the given length (the fault's own duration, not a
//! wait for anything) and undoes it, so the run never leaves a server frozen
//! or a proxy cut. [`HarnessInjector`] is the one every [`Harness`] gets from
//! its launched servers ([`Harness::launched_all`]) and fault proxies.

use super::FaultKind;
use crate::fault::{Fault, FaultControl};
use crate::harness::Harness;
use crate::servers::Launched;
use async_trait::async_trait;
use distlock_core::BoxError;
use rand::Rng;
use std::sync::Arc;
use std::time::Duration;

/// Applies faults to a backend under test.
#[async_trait]
pub trait Injector: Send + Sync {
    /// The kinds this injector can apply.
    fn kinds(&self) -> Vec<FaultKind>;

    /// Applies `kind` for `length`, then undoes it. Returns the target's name
    /// (`server`, `node2`, a client id) for the history.
    async fn inject(&self, kind: FaultKind, length: Duration) -> Result<String, BoxError>;

    /// Undoes whatever an interrupted fault may have left: resumes every
    /// server, starts any that is down, clears every proxy.
    async fn heal(&self) -> Result<(), BoxError>;
}

/// Server faults through the harness's launched servers, proxy faults through
/// its faulty clients' controls.
pub struct HarnessInjector<'a> {
    harness: &'a dyn Harness,
    proxies: Vec<(String, Arc<dyn FaultControl>)>,
    menu: Vec<FaultKind>,
}

impl std::fmt::Debug for HarnessInjector<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HarnessInjector")
            .field("harness", &self.harness.name())
            .field("proxies", &self.proxies.len())
            .field("menu", &self.menu)
            .finish()
    }
}

impl<'a> HarnessInjector<'a> {
    /// An injector for the kinds of `menu` that `harness` and `proxies` (each
    /// a faulty client's id and control) can apply.
    pub fn new(
        harness: &'a dyn Harness,
        proxies: Vec<(String, Arc<dyn FaultControl>)>,
        menu: &[FaultKind],
    ) -> Self {
        HarnessInjector {
            harness,
            proxies,
            menu: menu.to_vec(),
        }
    }

    fn servers(&self) -> Vec<(String, &'a dyn Launched)> {
        let servers = self.harness.launched_all();
        let many = servers.len() > 1;
        servers
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                (
                    if many {
                        format!("node{i}")
                    } else {
                        "server".into()
                    },
                    s,
                )
            })
            .collect()
    }

    fn pick_server(&self) -> Result<(String, &'a dyn Launched), BoxError> {
        let mut servers = self.servers();
        if servers.is_empty() {
            return Err("the harness launched no server".into());
        }
        let index = rand::rng().random_range(0..servers.len());
        Ok(servers.swap_remove(index))
    }

    fn pick_proxy(&self) -> Result<(String, Arc<dyn FaultControl>), BoxError> {
        if self.proxies.is_empty() {
            return Err("no faulty client".into());
        }
        let index = rand::rng().random_range(0..self.proxies.len());
        let (name, control) = &self.proxies[index];
        Ok((name.clone(), control.clone()))
    }

    /// The launched servers that run in containers (none natively).
    fn contained(&self) -> Vec<(String, &'a dyn Launched)> {
        self.servers()
            .into_iter()
            .filter(|(_, server)| server.process().container().is_some())
            .collect()
    }

    /// Cuts one containerised server off its network for `length` (every
    /// holder on it loses its traffic; the process keeps running and keeps its
    /// connections, which resume or time out once it is back), or natively one
    /// faulty client's proxy, which drops its bytes as a cut link would.
    async fn network_cut(&self, length: Duration) -> Result<String, BoxError> {
        let mut contained = self.contained();
        if contained.is_empty() {
            return self.proxy_fault(Fault::Blackhole, length).await;
        }
        let index = rand::rng().random_range(0..contained.len());
        let (name, server) = contained.swap_remove(index);
        server.process().disconnect()?;
        tokio::time::sleep(length).await;
        server.process().reconnect()?;
        Ok(name)
    }

    async fn proxy_fault(&self, fault: Fault, length: Duration) -> Result<String, BoxError> {
        let (name, control) = self.pick_proxy()?;
        control.set_fault(fault).await;
        tokio::time::sleep(length).await;
        control.set_fault(Fault::None).await;
        Ok(name)
    }
}

#[async_trait]
impl Injector for HarnessInjector<'_> {
    fn kinds(&self) -> Vec<FaultKind> {
        let has_servers = !self.harness.launched_all().is_empty();
        let has_proxies = !self.proxies.is_empty();
        self.menu
            .iter()
            .copied()
            .filter(|kind| match kind {
                FaultKind::ServerPause | FaultKind::ServerKill => has_servers,
                FaultKind::HolderPause => false,
                FaultKind::NetworkCut => has_proxies || !self.contained().is_empty(),
                _ => has_proxies,
            })
            .collect()
    }

    async fn inject(&self, kind: FaultKind, length: Duration) -> Result<String, BoxError> {
        match kind {
            FaultKind::ServerPause => {
                let (name, server) = self.pick_server()?;
                server.process().pause()?;
                tokio::time::sleep(length).await;
                server.process().resume()?;
                Ok(name)
            }
            FaultKind::ServerKill => {
                let (name, server) = self.pick_server()?;
                server.process().kill();
                // Down from no time at all (a supervisor restarts it at once,
                // while holders still believe) to half the fault's length.
                let down = length.mul_f64(rand::rng().random_range(0.0..0.5));
                tokio::time::sleep(down).await;
                server.restart().await?;
                Ok(name)
            }
            FaultKind::ProxyDelay => {
                // Long enough to matter against the ttl, short enough that most
                // replies still leave validity.
                let delay = length / 8;
                self.proxy_fault(Fault::Delay(delay), length).await
            }
            FaultKind::ProxyBlackhole => self.proxy_fault(Fault::Blackhole, length).await,
            FaultKind::ProxyReset => self.proxy_fault(Fault::Reset, length).await,
            FaultKind::ProxyClose => self.proxy_fault(Fault::Close, length).await,
            FaultKind::HolderPause => Err("holder pauses are run by the driver".into()),
            FaultKind::NetworkCut => self.network_cut(length).await,
        }
    }

    async fn heal(&self) -> Result<(), BoxError> {
        for (_, server) in self.servers() {
            if server.process().is_running() {
                // SIGCONT to a running process is harmless.
                server.process().resume()?;
            } else {
                server.restart().await?;
            }
        }
        for (_, control) in &self.proxies {
            control.set_fault(Fault::None).await;
        }
        Ok(())
    }
}
