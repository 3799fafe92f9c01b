//! The Curator side: `CuratorHolder.java` compiled once per run with the JDK's
//! `javac` against Debian's Curator jars, and one JVM per holder, driven over
//! stdin and stdout (the protocol is described in the Java file).

use distlock_testkit::cases::{CaseError, CaseResult};
use distlock_testkit::servers::INSTALL_COMMAND;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// The holder's source, kept beside this file.
const SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/interop/CuratorHolder.java");

/// The jars the holder compiles and runs against, with the Debian package of
/// each. `curator-recipes.jar`'s manifest names the others too; listing them
/// makes a missing one an error that says which package to install.
const JARS: &[(&str, &str)] = &[
    ("curator-recipes.jar", "libcurator-recipes-java"),
    ("curator-framework.jar", "libcurator-framework-java"),
    ("curator-client.jar", "libcurator-client-java"),
    ("zookeeper.jar", "libzookeeper-java"),
    ("zookeeper-jute.jar", "libzookeeper-java"),
    ("guava.jar", "libguava-java"),
    ("slf4j-api.jar", "libslf4j-java"),
    // Curator's and ZooKeeper's log lines go to the holder's stderr, kept for
    // failure messages.
    ("slf4j-simple.jar", "libslf4j-java"),
];

/// Where Debian installs Java libraries.
const JAVA_LIBS: &str = "/usr/share/java";

/// How long a JVM may take to start and open its ZooKeeper session.
const READY: Duration = Duration::from_secs(60);

/// The compiled holder and how to run it.
#[derive(Debug)]
pub struct Curator {
    java: PathBuf,
    classpath: String,
    /// The compiled classes; removed at the end of the run.
    classes: TempDir,
}

impl Curator {
    /// Finds the JDK and the jars and compiles the holder. A missing one is an
    /// error naming the package that provides it.
    pub async fn build() -> Result<Self, CaseError> {
        let java = binary("java", "default-jre-headless")?;
        let javac = binary("javac", "default-jdk-headless")?;
        let mut jars = Vec::new();
        for (jar, package) in JARS {
            let path = Path::new(JAVA_LIBS).join(jar);
            if !path.is_file() {
                return Err(missing(&path.display().to_string(), package));
            }
            jars.push(path.display().to_string());
        }
        let classes = tempfile::Builder::new()
            .prefix("distlock-curator-holder-")
            .tempdir()?;
        let mut classpath = vec![classes.path().display().to_string()];
        classpath.extend(jars);
        let classpath = classpath.join(":");
        let output = Command::new(&javac)
            .args(["-Xlint:all,-path", "-Werror", "-d"])
            .arg(classes.path())
            .args(["-cp", &classpath, SOURCE])
            .kill_on_drop(true)
            .output()
            .await?;
        if !output.status.success() {
            return Err(CaseError::msg(format!(
                "javac {SOURCE} failed:\n{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(Curator {
            java,
            classpath,
            classes,
        })
    }

    /// A new JVM with its own Curator client and session on `connect`, holding
    /// nothing yet, driving the recipe `mode` on `path`.
    pub async fn holder(
        &self,
        connect: &str,
        mode: &str,
        path: &str,
    ) -> Result<CuratorHolder, CaseError> {
        let stderr_dir = tempfile::Builder::new()
            .prefix("distlock-curator-stderr-")
            .tempdir()?;
        let stderr = std::fs::File::create(stderr_dir.path().join("stderr.log"))?;
        let mut child = Command::new(&self.java)
            .args([
                "-Xms32m",
                "-Xmx128m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
            ])
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .args(["-cp", &self.classpath, "CuratorHolder", connect, mode, path])
            .current_dir(self.classes.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            // If the test process dies instead, the holder reads the end of its
            // stdin and exits on its own.
            .kill_on_drop(true)
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(CaseError::msg("the holder's stdin or stdout was not piped"));
        };
        let mut holder = CuratorHolder {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            unclaimed: Vec::new(),
            stderr_dir,
        };
        holder.reply(&["ready"], READY).await?;
        Ok(holder)
    }
}

/// One running holder. Killed if dropped without [`CuratorHolder::close`].
#[derive(Debug)]
pub struct CuratorHolder {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// Replies read while waiting for another one (an `acquired` that came while
    /// `participants` was asked), oldest first.
    unclaimed: Vec<String>,
    stderr_dir: TempDir,
}

impl CuratorHolder {
    /// Sends one command line.
    pub async fn send(&mut self, command: &str) -> CaseResult {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// `acquire` and its reply: the node Curator holds the lock with.
    pub async fn acquire(&mut self, limit: Duration) -> Result<String, CaseError> {
        self.send("acquire").await?;
        self.acquired(limit).await
    }

    /// The `acquired <node>` reply to an earlier `acquire`.
    pub async fn acquired(&mut self, limit: Duration) -> Result<String, CaseError> {
        let line = self.reply(&["acquired"], limit).await?;
        Ok(rest(&line).to_owned())
    }

    /// `try`: the node, or `None` when another client holds the lock.
    pub async fn try_acquire(&mut self) -> Result<Option<String>, CaseError> {
        self.send("try").await?;
        let line = self.reply(&["acquired", "busy"], REPLY).await?;
        Ok(line.starts_with("acquired").then(|| rest(&line).to_owned()))
    }

    /// `release`, once Curator has deleted its node.
    pub async fn release(&mut self) -> CaseResult {
        self.send("release").await?;
        self.reply(&["released"], REPLY).await.map(drop)
    }

    /// Curator's view of the queue, holder first (full paths).
    pub async fn participants(&mut self) -> Result<Vec<String>, CaseError> {
        self.send("participants").await?;
        let line = self.reply(&["participants"], REPLY).await?;
        Ok(rest(&line).split_whitespace().map(str::to_owned).collect())
    }

    /// Whether an `acquired` reply has come in unasked-for (read while waiting
    /// for another reply).
    pub fn acquired_early(&self) -> bool {
        self.unclaimed
            .iter()
            .any(|line| first_word(line) == "acquired")
    }

    /// Closes stdin, so Curator closes its session (deleting its nodes) and
    /// the JVM exits; fails unless it exits cleanly.
    pub async fn close(mut self) -> CaseResult {
        self.stdin.shutdown().await?;
        drop(self.stdin);
        let status = tokio::time::timeout(REPLY, self.child.wait()).await;
        match status {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => Err(CaseError::msg(format!(
                "the Curator holder exited with {status}; stderr:\n{}",
                stderr_tail(self.stderr_dir.path())
            ))),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(CaseError::msg(format!(
                "the Curator holder did not exit within {REPLY:?} after its stdin closed"
            ))),
        }
    }

    /// The next reply whose first word is one of `words` (an earlier unclaimed
    /// one first). An `error` reply, the end of the output or `limit` fails,
    /// with the holder's stderr in the message.
    async fn reply(&mut self, words: &[&str], limit: Duration) -> Result<String, CaseError> {
        if let Some(at) = self
            .unclaimed
            .iter()
            .position(|line| words.contains(&first_word(line)))
        {
            return Ok(self.unclaimed.remove(at));
        }
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // `next_line` is cancel-safe: a line cut off by the timeout is not lost.
            let line = match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None)) => return Err(self.failure(words, "its output ended")),
                Ok(Err(e)) => return Err(self.failure(words, &format!("reading it failed: {e}"))),
                Err(_) => return Err(self.failure(words, &format!("no reply within {limit:?}"))),
            };
            if first_word(&line) == "error" {
                return Err(self.failure(words, &format!("it replied {line:?}")));
            }
            if words.contains(&first_word(&line)) {
                return Ok(line);
            }
            self.unclaimed.push(line);
        }
    }

    fn failure(&self, words: &[&str], what: &str) -> CaseError {
        CaseError::msg(format!(
            "waiting for the Curator holder's {words:?}: {what}; unclaimed replies: {:?}; stderr:\n{}",
            self.unclaimed,
            stderr_tail(self.stderr_dir.path())
        ))
    }
}

/// How long a command other than `acquire` may take.
const REPLY: Duration = Duration::from_secs(20);

fn first_word(line: &str) -> &str {
    line.split_whitespace().next().unwrap_or_default()
}

fn rest(line: &str) -> &str {
    line.split_once(' ').map_or("", |(_, rest)| rest.trim())
}

fn stderr_tail(dir: &Path) -> String {
    let text = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// `name` on `PATH`, or an error saying which package provides it.
fn binary(name: &str, package: &str) -> Result<PathBuf, CaseError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| missing(name, package))
}

fn missing(what: &str, package: &str) -> CaseError {
    CaseError::msg(format!(
        "`{what}` not found: the Curator interop cases need it; install it with \
         `{INSTALL_COMMAND}` (or `sudo apt-get install {package}`)"
    ))
}
