//! `distlock elect --observe KEY`: who leads an election, printed at each
//! change until Ctrl-C, without campaigning.

use crate::args::UrlArg;
use crate::exit::{self, Failure, describe};
use distlock::LockKey;
use distlock::toolkit::Holder;
use std::io::Write;
use tokio::signal::unix::{SignalKind, signal};

pub async fn observe(url: &UrlArg, key: &LockKey) -> Result<u8, Failure> {
    let url = url.require()?;
    let listen = |kind| {
        signal(kind)
            .map_err(|e| Failure::new(exit::FAILURE, format!("cannot listen for signals: {e}")))
    };
    let (mut interrupt, mut terminate) = (
        listen(SignalKind::interrupt())?,
        listen(SignalKind::terminate())?,
    );
    let watching = async {
        let lock = distlock::connect(url).await?;
        let election = lock.election().ok_or_else(|| {
            let why = lock.capabilities().primitives.election.why_not();
            Failure::usage(format!(
                "the {} backend offers no election{}",
                lock.name(),
                why.map(|w| format!(": {w}")).unwrap_or_default()
            ))
        })?;
        let mut watch = election.observe(key);
        while let Some(update) = watch.next().await {
            match update {
                Ok(leader) => print_line(&line(leader.as_ref()))?,
                Err(e) => eprintln!(
                    "distlock: watching `{key}`: {}; still watching",
                    describe(&e)
                ),
            }
        }
        Ok::<u8, Failure>(exit::OK)
    };
    tokio::select! {
        outcome = watching => outcome,
        _ = interrupt.recv() => Ok(exit::OK),
        _ = terminate.recv() => Ok(exit::OK),
    }
}

/// One change, as printed: `vacant`, or `leader term=T holder=H`.
fn line(leader: Option<&Holder>) -> String {
    match leader {
        None => "vacant".into(),
        Some(l) => {
            let term = l.token.map_or_else(|| "?".into(), |t| t.to_string());
            format!("leader term={term} holder={}", l.owner)
        }
    }
}

/// Prints and flushes at once, so a pipe sees each change as it happens; a
/// closed pipe ends the watch.
fn print_line(line: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::new(exit::FAILURE, format!("cannot write: {e}")))
}
