//! The requests every member has received, from its own Prometheus metrics,
//! for benchmarks that count round trips per lock cycle.
//!
//! etcd serves `/metrics` on its client URLs. `grpc_server_msg_received_total`
//! counts every gRPC message a member received: one per unary request (a `Txn`,
//! a `Get`), and one per message on a stream (a watch created or cancelled, a
//! lease keep-alive), which is what a lock client sends. Members are found with
//! `MemberList`, which itself counts one message; over TLS (`https://` client
//! URLs) this plain reader cannot fetch them and says so with `None`.

use crate::error::Failure;
use crate::rpc::Rpc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The counter summed over its methods and codes.
const RECEIVED: &str = "grpc_server_msg_received_total";
/// A bound on one member's metrics page (a few hundred KiB in practice).
const MAX_PAGE: u64 = 8 << 20;

/// Messages received by every member so far, summed; `None` when a member's
/// client URLs are all TLS.
pub(crate) async fn requests_received(
    client: &crate::client::Client,
    rpc: &Rpc,
) -> Result<Option<u64>, Failure> {
    let members = rpc.call("member list", client.member_list()).await?;
    let mut total = 0;
    for member in members.members() {
        let plain = member
            .client_urls()
            .iter()
            .find_map(|url| url.strip_prefix("http://"));
        let Some(authority) = plain else {
            return Ok(None);
        };
        let authority = authority.trim_end_matches('/');
        let page = match tokio::time::timeout(rpc.timeout, fetch(authority)).await {
            Ok(Ok(page)) => page,
            Ok(Err(e)) => return Err(unreadable(rpc, authority, &e.to_string())),
            Err(_) => return Err(unreadable(rpc, authority, "no answer in time")),
        };
        let received = sum_of(&page, RECEIVED)
            .ok_or_else(|| unreadable(rpc, authority, &format!("no {RECEIVED} in the page")))?;
        total += received;
    }
    Ok(Some(total))
}

fn unreadable(rpc: &Rpc, authority: &str, why: &str) -> Failure {
    Failure::Other(
        rpc.endpoints
            .unavailable(format!("cannot read http://{authority}/metrics: {why}")),
    )
}

/// `GET /metrics` over HTTP/1.1, the whole answer (headers included).
async fn fetch(authority: &str) -> std::io::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(authority).await?;
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut page = Vec::new();
    stream.take(MAX_PAGE).read_to_end(&mut page).await?;
    Ok(String::from_utf8_lossy(&page).into_owned())
}

/// The sum of every sample of `metric` in a Prometheus text page; `None` when
/// it has none.
fn sum_of(page: &str, metric: &str) -> Option<u64> {
    let values: Vec<f64> = page
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(metric)?;
            if !rest.starts_with(['{', ' ']) {
                return None;
            }
            line.rsplit_once(' ')?.1.parse().ok()
        })
        .collect();
    // Counters are whole numbers below 2^53: exact as f64.
    (!values.is_empty()).then(|| values.iter().sum::<f64>() as u64)
}

#[cfg(test)]
mod tests {
    use super::sum_of;

    #[test]
    fn samples_of_one_metric_are_summed() {
        let page = "# TYPE grpc_server_msg_received_total counter\n\
            grpc_server_msg_received_total{grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} 12\n\
            grpc_server_msg_received_total{grpc_method=\"Watch\",grpc_service=\"etcdserverpb.Watch\",grpc_type=\"bidi_stream\"} 3\n\
            grpc_server_msg_received_totally_else 100\n\
            grpc_server_msg_sent_total{grpc_method=\"Txn\"} 40\n";
        assert_eq!(sum_of(page, "grpc_server_msg_received_total"), Some(15));
        assert_eq!(
            sum_of("nothing here", "grpc_server_msg_received_total"),
            None
        );
    }
}
