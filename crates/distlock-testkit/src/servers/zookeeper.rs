//! ZooKeeper launcher: a standalone `ZooKeeperServerMain` on a short tickTime, so
//! sessions can expire within a second.

mod ensemble;

pub use ensemble::{Mode, ZooKeeperEnsemble};

use super::process::ServerProcess;
use super::server::Server;
use super::tls::ServerTls;
use super::{
    Placement, READY_TIMEOUT, ServerError, free_port, place, retry_on_exit, write_private,
};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const STOP_GRACE: Duration = Duration::from_secs(10);
/// The jar of Debian's `zookeeper` package; its manifest names every dependency.
const DEBIAN_JAR: &str = "/usr/share/java/zookeeper.jar";
/// A logging backend from libslf4j-java, used when present, so the log says
/// something (without one, ZooKeeper logs nothing at all).
const SLF4J_SIMPLE_JAR: &str = "/usr/share/java/slf4j-simple.jar";
/// Netty jars (libnetty-java) that the Netty connection factory, the only one
/// that speaks TLS, needs but the Debian jar's manifest does not list.
const NETTY_JARS: [&str; 3] = [
    "/usr/share/java/netty-codec.jar",
    "/usr/share/java/netty-resolver.jar",
    "/usr/share/java/netty-transport-native-unix-common.jar",
];
/// JVM flags for a fast, small test server.
const JVM_FLAGS: &[&str] = &[
    "-Xms64m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss512k",
];

/// How a [`ZooKeeperServer`] is configured.
#[derive(Clone)]
pub struct ZooKeeperOptions {
    /// The ZooKeeper tick; session timeouts are bounded by 2 and 20 ticks by default.
    pub tick_time: Duration,
    /// Shortest session timeout the server grants.
    pub min_session_timeout: Duration,
    /// Longest session timeout the server grants.
    pub max_session_timeout: Duration,
    /// Password of the `super` digest user, who may read and change every znode
    /// whatever its ACL (`DigestAuthenticationProvider.superDigest`).
    pub super_password: Option<String>,
    /// Also serve clients over TLS on a `secureClientPort`
    /// ([`ZooKeeperServer::tls_port`]); the plain port stays for the launcher's
    /// readiness check and four-letter words.
    pub tls: Option<ServerTls>,
    /// How often the server's container reaper deletes empty container nodes
    /// (`znode.container.checkIntervalMs`; ZooKeeper's default, 60 s, unless
    /// a test wants empty lock directories gone sooner).
    pub container_check_interval: Duration,
}

impl Default for ZooKeeperOptions {
    fn default() -> Self {
        ZooKeeperOptions {
            tick_time: Duration::from_millis(200),
            min_session_timeout: Duration::from_millis(400),
            max_session_timeout: Duration::from_secs(60),
            super_password: None,
            tls: None,
            container_check_interval: Duration::from_secs(60),
        }
    }
}

impl std::fmt::Debug for ZooKeeperOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperOptions")
            .field("tick_time", &self.tick_time)
            .field("min_session_timeout", &self.min_session_timeout)
            .field("max_session_timeout", &self.max_session_timeout)
            .field(
                "super_password",
                &self.super_password.as_ref().map(|_| "<redacted>"),
            )
            .field("tls", &self.tls)
            .field("container_check_interval", &self.container_check_interval)
            .finish()
    }
}

/// A standalone ZooKeeper (`java ... ZooKeeperServerMain`) on a free loopback port,
/// with its data in its own temp dir and every four-letter word enabled.
///
/// The process is killed when this value is dropped. [`Server::tls_port`] is
/// the `secureClientPort` of a server started with [`ZooKeeperOptions::tls`].
pub type ZooKeeperServer = Server<ZooKeeper>;

/// A ZooKeeper [`Server`] adds nothing to what every server has.
#[derive(Debug)]
pub struct ZooKeeper;

impl ZooKeeperServer {
    /// Starts a server with default options and waits until it serves clients.
    pub async fn start() -> Result<Self, ServerError> {
        Self::start_with(ZooKeeperOptions::default()).await
    }

    /// Starts a server with `options` and waits until it serves clients.
    pub async fn start_with(options: ZooKeeperOptions) -> Result<Self, ServerError> {
        let placement = place("zookeeper")?;
        let java = placement.binary("java", "default-jre-headless")?;
        let classpath = classpath(&placement)?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-zookeeper-")
            .tempdir()
            .map_err(ServerError::io("create a temp dir for zookeeper"))?;
        let mut jvm_args: Vec<OsString> = JVM_FLAGS.iter().map(OsString::from).collect();
        let reaper = options.container_check_interval.as_millis();
        jvm_args.push(format!("-Dznode.container.checkIntervalMs={reaper}").into());
        if let Some(password) = &options.super_password {
            let digest = super_digest(&placement, &java, &classpath, password, dir.path()).await?;
            jvm_args.push(
                format!("-Dzookeeper.DigestAuthenticationProvider.superDigest={digest}").into(),
            );
        }
        let config = dir.path().join("zoo.cfg");
        let (port, tls_port, process) = retry_on_exit(async || {
            let port = free_port()?;
            let tls_port = options.tls.as_ref().map(|_| free_port()).transpose()?;
            let mut text = config_text(placement.bind(), port, &dir.path().join("data"), &options);
            if let (Some(tls), Some(tls_port)) = (&options.tls, tls_port) {
                text.push_str(&tls.zookeeper_config(tls_port));
            }
            write_private(&config, &text)?;
            let mut args = jvm_args.clone();
            args.extend(["-cp".into(), classpath.clone().into()]);
            args.push("org.apache.zookeeper.server.ZooKeeperServerMain".into());
            args.push(config.clone().into());
            let process =
                ServerProcess::start_at(&placement, "zookeeper", &java, args, dir.path())?;
            let addr = SocketAddr::new(placement.host(), port);
            process
                .wait_ready(READY_TIMEOUT, || ready(addr, tls_port))
                .await?;
            Ok((port, tls_port, process))
        })
        .await?;
        Ok(Server::new(
            placement.host(),
            (port, tls_port),
            process,
            dir,
            ZooKeeper,
        ))
    }

    /// The connect string, `<host>:<port>` (host `127.0.0.1`, or the container's
    /// address), as ZooKeeper clients take it.
    pub fn url(&self) -> String {
        self.addr().to_string()
    }

    /// Shuts the server down (SIGTERM), killing it if that takes too long.
    pub async fn stop(&self) {
        self.process.stop(STOP_GRACE).await;
    }

    /// Stops the server if it runs, then starts it on the same port with the same
    /// data dir (znodes and sessions survive) and waits until it answers.
    pub async fn restart(&self) -> Result<(), ServerError> {
        let (addr, tls_port) = (self.addr(), self.tls_port());
        self.process
            .restart(STOP_GRACE, READY_TIMEOUT, || ready(addr, tls_port))
            .await
    }

    /// Sends a four-letter word (`ruok`, `stat`, `cons`, `mntr`, ...) and returns the
    /// whole answer.
    pub async fn four_letter_word(&self, word: &str) -> Result<String, ServerError> {
        four_letter_word(self.addr(), word)
            .await
            .map_err(ServerError::io(format!("zookeeper `{word}`")))
    }

    /// The server's monitoring counters (`mntr`), such as `zk_packets_received`,
    /// `zk_ephemerals_count` and `zk_num_alive_connections`.
    pub async fn mntr(&self) -> Result<BTreeMap<String, String>, ServerError> {
        let text = self.four_letter_word("mntr").await?;
        let pairs: BTreeMap<String, String> = text
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(key, value)| (key.to_owned(), value.trim().to_owned()))
            .collect();
        if pairs.is_empty() {
            return Err(ServerError::Protocol(format!(
                "zookeeper `mntr` gave no counters: {text:?}"
            )));
        }
        Ok(pairs)
    }
}

/// The JVM classpath: `DISTLOCK_ZOOKEEPER_CLASSPATH` if set, else Debian's jar
/// (and the optional jars; in a container, all of them: the JVM skips missing ones).
fn classpath(placement: &Placement) -> Result<String, ServerError> {
    if placement.is_container() {
        let jars: Vec<&str> = [DEBIAN_JAR, SLF4J_SIMPLE_JAR]
            .into_iter()
            .chain(NETTY_JARS)
            .collect();
        return Ok(jars.join(":"));
    }
    if let Some(classpath) = std::env::var("DISTLOCK_ZOOKEEPER_CLASSPATH")
        .ok()
        .filter(|cp| !cp.trim().is_empty())
    {
        return Ok(classpath);
    }
    if !Path::new(DEBIAN_JAR).is_file() {
        return Err(ServerError::Missing {
            binary: DEBIAN_JAR.into(),
            install_hint: format!(
                "`{}` (or `sudo apt-get install zookeeper`), or set \
                 DISTLOCK_ZOOKEEPER_CLASSPATH",
                super::INSTALL_COMMAND
            ),
        });
    }
    let mut classpath = DEBIAN_JAR.to_owned();
    for jar in std::iter::once(SLF4J_SIMPLE_JAR).chain(NETTY_JARS) {
        if Path::new(jar).is_file() {
            classpath.push(':');
            classpath.push_str(jar);
        }
    }
    Ok(classpath)
}

fn config_text(bind: IpAddr, port: u16, data_dir: &Path, options: &ZooKeeperOptions) -> String {
    format!(
        "tickTime={}\ndataDir={}\nclientPort={port}\nclientPortAddress={bind}\n\
         minSessionTimeout={}\nmaxSessionTimeout={}\nmaxClientCnxns=0\n\
         4lw.commands.whitelist=*\nadmin.enableServer=false\n",
        options.tick_time.as_millis(),
        data_dir.display(),
        options.min_session_timeout.as_millis(),
        options.max_session_timeout.as_millis(),
    )
}

/// `super:<base64(sha1("super:password"))>`, computed by ZooKeeper's own
/// `DigestAuthenticationProvider` so the format is exactly what the server expects.
async fn super_digest(
    placement: &Placement,
    java: &Path,
    classpath: &str,
    password: &str,
    dir: &Path,
) -> Result<String, ServerError> {
    let mut args: Vec<OsString> = JVM_FLAGS.iter().map(OsString::from).collect();
    args.extend(["-cp".into(), classpath.into()]);
    args.push("org.apache.zookeeper.server.auth.DigestAuthenticationProvider".into());
    args.push(format!("super:{password}").into());
    let output = match placement.docker() {
        Some((run, image)) => super::docker::run_once(run, image, java, &args, dir, &[]).await?,
        None => tokio::process::Command::new(java)
            .args(&args)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(ServerError::io("run DigestAuthenticationProvider"))?,
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    // It prints `super:<password>-><digest>`.
    stdout
        .lines()
        .find_map(|line| {
            line.rsplit_once("->")
                .map(|(_, digest)| digest.trim().to_owned())
        })
        .filter(|digest| digest.starts_with("super:"))
        .ok_or_else(|| ServerError::Command {
            command: "DigestAuthenticationProvider super:<password>".into(),
            output: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
}

/// Serving clients on the plain port (`srvr` names its mode), and a listening
/// `secureClientPort` when there is one: Netty binds it after the plain port
/// answers. `ruok` is not enough: its `imok` says the process is bound to
/// the port (ZooKeeper's documentation), not that it serves; a session
/// request before it serves is closed, and a test's first connect then
/// waits for the next attempt.
async fn ready(addr: SocketAddr, tls_port: Option<u16>) -> bool {
    let secure = async {
        match tls_port {
            Some(port) => TcpStream::connect(SocketAddr::new(addr.ip(), port))
                .await
                .is_ok(),
            None => true,
        }
    };
    serving(addr).await && secure.await
}

async fn serving(addr: SocketAddr) -> bool {
    matches!(four_letter_word(addr, "srvr").await, Ok(answer) if answer.contains("Mode: "))
}

/// Times out, so a paused server cannot hang the caller.
async fn four_letter_word(addr: SocketAddr, word: &str) -> std::io::Result<String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(word.as_bytes()).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        Ok(answer)
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "zookeeper did not answer")
        })?
}
