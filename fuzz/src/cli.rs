//! The CLI's argument handling: clap parsing of every subcommand with the
//! CLI's own argument structs and value parsers, then the URL check each
//! subcommand does before connecting.

use crate::args::UrlArg;
use crate::commands::Cli;
use crate::secret::{check_span, secret_spans};
use crate::targets::result_texts;
use crate::usage;
use clap::{CommandFactory, FromArgMatches};
use std::ffi::OsString;
use std::ops::Range;
use std::os::unix::ffi::OsStringExt;

/// The arguments, one per line of the input, after the program name.
fn argv(input: &[u8]) -> impl Iterator<Item = OsString> + '_ {
    std::iter::once(OsString::from("distlock")).chain(
        input
            .split(|b| *b == b'\n')
            .map(|arg| OsString::from_vec(arg.to_vec())),
    )
}

/// What the CLI shows for these arguments before it would connect: clap's
/// error as main.rs prints it (through the CLI's own `usage::shown`, styles
/// removed), or the URL check's failure.
pub fn shown(input: &[u8]) -> Vec<String> {
    let args: Vec<OsString> = argv(input).collect();
    let matches = match Cli::command().try_get_matches_from(&args) {
        Ok(matches) => matches,
        Err(error) => return vec![usage::shown(&error, &args).to_string()],
    };
    if let Err(error) = Cli::from_arg_matches(&matches) {
        panic!("matches that clap accepted do not build the arguments: {error}");
    }
    let Some((name, sub)) = matches.subcommand() else {
        panic!("clap accepted arguments without a subcommand");
    };
    let url = sub.get_one::<String>("url").cloned();
    if name == "demo" {
        return url
            .map(|url| result_texts(&distlock::BackendKind::from_url(&url)))
            .unwrap_or_default();
    }
    match (UrlArg { url }).require() {
        Ok(_) => Vec::new(),
        Err(failure) => vec![failure.message.clone(), format!("{failure:?}")],
    }
}

/// The secrets of every argument that looks like a URL, as byte ranges of
/// the whole input: not only the `--url` value, because clap quotes whole an
/// argument it did not take (a URL whose `--url` was forgotten, one starting
/// with `-`, `--url=URL` after `--`), and the CLI must redact that too.
fn url_secret_spans(text: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let mut offset = 0;
    for arg in text.split('\n') {
        spans.extend(
            secret_spans(arg)
                .into_iter()
                .map(|s| s.start + offset..s.end + offset),
        );
        offset += arg.len() + 1;
    }
    spans
}

/// Parses the input as the CLI's arguments, one per line.
pub fn cli_args(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        shown(data);
        return;
    };
    let spans = url_secret_spans(text);
    if spans.is_empty() {
        shown(data);
    }
    for span in spans {
        check_span(text, span, &|t| shown(t.as_bytes()));
    }
}
