//! [`NatsCluster`]: several `nats-server -js` joined by routes into one
//! JetStream cluster, each in its own container (or process) with its own
//! store, so a member can be killed or, in a container, cut off the network.

use super::nats::{Nats, NatsServer, ready};
use super::process::ServerProcess;
use super::server::Server;
use super::{READY_TIMEOUT, ServerError, free_port, place, retry_on_exit};
use std::ffi::OsString;
use std::net::SocketAddr;

/// A JetStream cluster; its members are killed when it is dropped.
#[derive(Debug)]
pub struct NatsCluster {
    members: Vec<NatsServer>,
}

impl NatsCluster {
    /// Starts `size` members named `n0`, `n1`, … (their JetStream server
    /// names, which a stream's cluster information reports as its leader),
    /// and waits until each greets clients with JetStream on.
    pub async fn start(size: usize) -> Result<Self, ServerError> {
        let placements = (0..size)
            .map(|_| place("nats"))
            .collect::<Result<Vec<_>, _>>()?;
        let binary = match placements.first() {
            Some(placement) => placement.binary("nats-server", "nats-server")?,
            None => {
                return Ok(NatsCluster {
                    members: Vec::new(),
                });
            }
        };
        let members = retry_on_exit(async || {
            let mut ports = Vec::with_capacity(size);
            for _ in 0..size {
                ports.push((free_port()?, free_port()?));
            }
            let routes: Vec<String> = (placements.iter().zip(&ports))
                .map(|(at, (_, route))| format!("nats://{}", SocketAddr::new(at.host(), *route)))
                .collect();
            let mut spawned = Vec::with_capacity(size);
            for (index, (placement, (port, route))) in placements.iter().zip(&ports).enumerate() {
                let dir = tempfile::Builder::new()
                    .prefix("distlock-nats-")
                    .tempdir()
                    .map_err(ServerError::io("create a temp dir for nats-server"))?;
                let bind = placement.bind();
                let args: Vec<OsString> = [
                    "-js".to_owned(),
                    "-sd".to_owned(),
                    dir.path().join("jetstream").display().to_string(),
                    "-a".to_owned(),
                    bind.to_string(),
                    "-p".to_owned(),
                    port.to_string(),
                    "-n".to_owned(),
                    format!("n{index}"),
                    "--cluster_name".to_owned(),
                    "distlock".to_owned(),
                    "--cluster".to_owned(),
                    format!("nats://{}", SocketAddr::new(bind, *route)),
                    "--routes".to_owned(),
                    routes.join(","),
                ]
                .into_iter()
                .map(OsString::from)
                .collect();
                let name = format!("nats-server n{index}");
                let process = ServerProcess::start_at(placement, &name, &binary, args, dir.path())?;
                spawned.push((placement.host(), *port, process, dir));
            }
            let mut members = Vec::with_capacity(size);
            for (host, port, process, dir) in spawned {
                let addr = SocketAddr::new(host, port);
                process.wait_ready(READY_TIMEOUT, || ready(addr)).await?;
                members.push(Server::new(host, (port, None), process, dir, Nats));
            }
            Ok(members)
        })
        .await?;
        Ok(NatsCluster { members })
    }

    /// All members, in start order (member `i` is server `n<i>`).
    pub fn members(&self) -> &[NatsServer] {
        &self.members
    }

    /// The index of the member JetStream calls `name` (`n<i>`).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        let index: usize = name.strip_prefix('n')?.parse().ok()?;
        (index < self.members.len()).then_some(index)
    }
}
