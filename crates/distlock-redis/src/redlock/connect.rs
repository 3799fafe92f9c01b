//! Connecting a Redlock client: every node at once, a majority required.

use super::config::{BACKEND, RedlockConfig};
use super::lock::RedlockBackend;
use super::round;
use super::tally::describe;
use crate::node::{Node, NodeTimeouts};
use distlock_core::LockError;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

impl RedlockBackend {
    /// Makes a node per server and checks them all at once.
    pub(crate) async fn connect(config: RedlockConfig) -> Result<Self, LockError> {
        let timeouts = NodeTimeouts {
            connect: config.connect_timeout,
            response: config.node_timeout,
        };
        let mut nodes = Vec::with_capacity(config.nodes.len());
        for server in &config.nodes {
            nodes.push(Arc::new(Node::new(server, BACKEND, timeouts)?));
        }
        let backend = RedlockBackend {
            quorum: nodes.len() / 2 + 1,
            nodes,
            namespace: config.namespace,
            default_ttl: config.default_ttl,
            node_timeout: config.node_timeout,
            retry_delay: config.retry_delay,
            slow_grace: config.connect_timeout,
        };
        let deadline = Instant::now() + config.connect_timeout + config.node_timeout;
        let budget = config.node_timeout;
        let targets = (0..backend.nodes.len()).collect();
        let replies = round::all(
            &backend.nodes,
            targets,
            deadline.into(),
            |node| async move { node.check(budget).await },
        )
        .await;
        let ok: HashSet<usize> = replies
            .iter()
            .filter(|r| r.result.is_ok())
            .map(|r| r.node)
            .collect();
        let mut failed = Vec::new();
        for reply in replies {
            if let Err(e) = reply.result {
                failed.push(describe(&backend.nodes, reply.node, BACKEND, e));
            }
        }
        for (index, node) in backend.nodes.iter().enumerate() {
            if !ok.contains(&index) && !failed.iter().any(|f| f.starts_with(&*node.endpoint)) {
                failed.push(format!(
                    "{}: no answer within {:?}",
                    node.endpoint, config.connect_timeout
                ));
            }
        }
        for failure in &failed {
            tracing::warn!(failure = %failure, "redlock node unavailable at connect; its vote counts as lost until it answers");
        }
        if ok.len() < backend.quorum {
            return Err(backend.quorum_unavailable(ok.len(), failed.join("; ")));
        }
        Ok(backend)
    }
}
