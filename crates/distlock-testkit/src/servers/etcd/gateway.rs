//! The member's HTTP gateway, spoken by hand over a TCP stream: `/health` for
//! readiness and `/v3/maintenance/status` for the leader. Apart because it is a
//! small HTTP client, not the launcher.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HTTP_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether `/health` on `addr` says `"health":"true"`.
pub(super) async fn healthy(addr: SocketAddr) -> bool {
    match http_request(addr, "GET", "/health", "").await {
        Ok((200, body)) => body.replace(' ', "").contains("\"health\":\"true\""),
        _ => false,
    }
}

/// One HTTP/1.1 request with `Connection: close`; returns the status code and body.
/// Times out, so a paused member cannot hang the caller.
pub(super) async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(HTTP_TIMEOUT, exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "etcd did not answer"))??;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Ok((code, body.to_owned()))
}

/// The first `"key":"<digits>"` value in `json` (the gateway renders uint64 fields
/// as strings).
pub(super) fn json_u64(json: &str, key: &str) -> Option<u64> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let rest = &json[start..];
    rest[..rest.find('"')?].parse().ok()
}
