//! The CLI's argument handling: clap parsing of every subcommand with the
//! CLI's own argument structs and value parsers, then the URL check each
//! subcommand does before connecting.

use crate::args::UrlArg;
use crate::commands::Cli;
use crate::secret::{check_span, secret_spans};
use crate::targets::result_texts;
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
/// error, or the URL check's failure.
pub fn shown(input: &[u8]) -> Vec<String> {
    let matches = match Cli::command().try_get_matches_from(argv(input)) {
        Ok(matches) => matches,
        Err(error) => return vec![error.to_string(), format!("{error:?}")],
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

/// The secrets of every `--url URL` and `--url=URL` argument, as byte ranges
/// of the whole input.
fn url_secret_spans(text: &str) -> Vec<Range<usize>> {
    let mut args = Vec::new();
    let mut offset = 0;
    for arg in text.split('\n') {
        args.push((offset, arg));
        offset += arg.len() + 1;
    }
    let mut spans = Vec::new();
    // After a bare `--` nothing is an option, so nothing is the URL.
    let options = args
        .iter()
        .position(|(_, arg)| *arg == "--")
        .unwrap_or(args.len());
    for (i, (offset, arg)) in args[..options].iter().enumerate() {
        let url = match arg.strip_prefix("--url=") {
            Some(url) => Some((offset + 6, url)),
            // clap takes the next argument as the value unless it starts with
            // `-`; then it is no URL, and clap may quote it as an unknown flag.
            None if *arg == "--url" => args
                .get(i + 1)
                .copied()
                .filter(|(_, v)| !v.starts_with('-')),
            None => None,
        };
        if let Some((at, url)) = url {
            spans.extend(
                secret_spans(url)
                    .into_iter()
                    .map(|s| s.start + at..s.end + at),
            );
        }
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
