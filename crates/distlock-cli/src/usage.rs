//! clap's refusals of a command line, shown without the secrets they may quote.
//!
//! clap quotes an argument it did not take whole ("unexpected argument '…'
//! found", and again in its "tip: … use '-- …'"), so a URL that missed its
//! `--url` (forgotten, starting with `-`, or after `--`) would be printed with
//! its password. Every such message goes through [`shown`] before it is
//! printed; the fuzz target `cli_args` checks the same function.

use crate::commands::Cli;
use crate::exit;
use clap::CommandFactory;
use clap::builder::StyledStr;
use clap::error::ErrorKind;
use distlock::toolkit::redact;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

/// Help and version: text written by us (env values are hidden), never the
/// user's arguments. Left as clap renders it, because redacting would mangle
/// the `USER:PASS@HOST` placeholder of `--url`'s help.
fn own_text(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    )
}

/// The text the CLI prints for `error`, raised for the command line `args`
/// (program name first), with clap's styles: every quoted argument and every
/// word that looks like a URL has its passwords and secret parameters masked.
pub fn shown(error: &clap::Error, args: &[OsString]) -> StyledStr {
    let rendered = error.render();
    if own_text(error.kind()) {
        return rendered;
    }
    let mut text = rendered.ansi().to_string();
    // First each argument as clap quotes it, whole: a password may hold a
    // space or a quote, which would split it across the words below.
    for (raw, redacted) in quotable(args) {
        text = text.replace(&raw, &redacted);
    }
    // Then word by word, for any other way clap may cut an argument.
    StyledStr::from(redact_words(&text))
}

/// Prints `error` where and how clap would (help and version to stdout; usage
/// errors to stderr, coloured by the same rule), redacted, and returns clap's
/// exit code: 0 for help and version, 2 for usage errors.
pub fn report(error: &clap::Error, args: &[OsString]) -> ExitCode {
    let code = u8::try_from(error.exit_code()).unwrap_or(exit::USAGE);
    if own_text(error.kind()) {
        // Nothing of the user's in it (see `own_text`): clap prints it itself,
        // with its own stream and colour rules for help. A closed pipe is
        // ignored, as `clap::Error::exit` does.
        let _ = error.print();
        return ExitCode::from(code);
    }
    // What clap's own printer decides: the command's colour setting, then
    // anstream's terminal and NO_COLOR/CLICOLOR checks, stripping the styles
    // when colour is off.
    let choice = match Cli::command().get_color() {
        clap::ColorChoice::Always => anstream::ColorChoice::Always,
        clap::ColorChoice::Never => anstream::ColorChoice::Never,
        clap::ColorChoice::Auto => anstream::ColorChoice::Auto,
    };
    let mut stderr = anstream::AutoStream::new(std::io::stderr().lock(), choice);
    let _ = write!(stderr, "{}", shown(error, args).ansi());
    let _ = stderr.flush();
    ExitCode::from(code)
}

/// Every piece of an argument clap may quote that has a secret in it, longest
/// first, with its redaction: the argument, either side of `--name=value` (an
/// unknown flag is quoted as `--name` alone), and the value after a short flag
/// (`-kVALUE`, `-k=VALUE`). clap shows non-UTF-8 arguments lossily, and so are
/// they matched here.
fn quotable(args: &[OsString]) -> Vec<(String, String)> {
    let mut pieces = Vec::new();
    for arg in args.iter().skip(1) {
        let arg = arg.to_string_lossy();
        let mut candidates = vec![arg.as_ref()];
        if let Some((name, value)) = arg.split_once('=') {
            candidates.extend([name, value]);
        }
        if !arg.starts_with("--")
            && let Some(value) = arg.strip_prefix('-').and_then(|a| a.get(1..))
        {
            candidates.push(value.strip_prefix('=').unwrap_or(value));
        }
        for candidate in candidates {
            let redacted = redact(candidate);
            if !candidate.is_empty() && redacted != candidate {
                pieces.push((candidate.to_owned(), redacted));
            }
        }
    }
    // A longer piece may contain a shorter one; masked first, it is masked whole.
    pieces.sort_by_key(|(raw, _)| std::cmp::Reverse(raw.len()));
    pieces
}

/// `text` with every word (a run between whitespace, quotes and escape
/// characters) redacted as a URL; words that are not URLs come back unchanged.
fn redact_words(text: &str) -> String {
    let separator = |c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`' | '\x1b');
    let mut out = String::with_capacity(text.len());
    let mut word_start = None;
    for (at, c) in text.char_indices() {
        match (separator(c), word_start) {
            (true, Some(start)) => {
                out.push_str(&redact(&text[start..at]));
                out.push(c);
                word_start = None;
            }
            (true, None) => out.push(c),
            (false, None) => word_start = Some(at),
            (false, Some(_)) => {}
        }
    }
    if let Some(start) = word_start {
        out.push_str(&redact(&text[start..]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        std::iter::once("distlock")
            .chain(list.iter().copied())
            .map(OsString::from)
            .collect()
    }

    fn plain(list: &[&str]) -> String {
        let args = args(list);
        match Cli::try_parse_from(&args) {
            Ok(_) => panic!("{list:?} was accepted"),
            Err(error) => shown(&error, &args).to_string(),
        }
    }

    use clap::Parser;

    #[test]
    fn a_url_clap_did_not_take_is_shown_redacted() {
        for list in [
            &["check", "redis://:longpassword@cache:6379"][..],
            &["check", "--url", "--redis://u:longpassword@h/"],
            &["--", "--url=etcd://u:longpassword@h/e"],
            &["check", "redis://:long password'quoted@h"],
        ] {
            let text = plain(list);
            assert!(!text.contains("longpassword"), "{list:?}: {text}");
            assert!(!text.contains("long password"), "{list:?}: {text}");
            assert!(text.contains(":***@"), "{list:?}: {text}");
        }
        // Read as the short flags `-r…`: clap quotes only the first.
        let text = plain(&["check", "--url", "-redis://u:longpassword@h/"]);
        assert!(text.contains("'-r'"), "{text}");
    }

    #[test]
    fn secret_values_of_flags_are_redacted_wherever_quoted() {
        let text = plain(&[
            "run",
            "--ttl=redis://h/?password=hunter2hunter",
            "--",
            "true",
        ]);
        assert!(!text.contains("hunter2hunter"), "{text}");
        assert!(text.contains("password=***"), "{text}");
    }

    #[test]
    fn words_without_secrets_are_kept() {
        assert_eq!(
            redact_words("error: 'a:b@c' and\t\"x://u:p@h/?token=t\" kept"),
            "error: 'a:***@c' and\t\"x://u:***@h/?token=***\" kept"
        );
        let text = plain(&["lock"]);
        assert!(text.contains("unrecognized subcommand 'lock'"), "{text}");
    }

    #[test]
    fn help_is_shown_as_written() {
        let args = args(&["run", "--help"]);
        let Err(error) = Cli::try_parse_from(&args) else {
            panic!("--help parsed as a command line");
        };
        assert_eq!(error.exit_code(), 0);
        let text = shown(&error, &args).to_string();
        assert!(
            text.contains("mysql://USER:PASSWORD@HOST:3306/DB"),
            "{text}"
        );
    }
}
