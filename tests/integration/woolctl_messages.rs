//! `woolctl`'s words to an operator: what a usage error asks for, how a deadline is named, how
//! numbers and tables are written, where the global flags are in a command's help.

use crate::common;

use common::WorkerProcess;

use crate::woolctl::{stderr, stdout, woolctl};

/// The three ways to name the workers, as the usage line of `sweep` and `reap` gives them.
const TARGETS_USAGE: &str = "<ADDRESSES>... | --namespace <NAMESPACE> | --dns-name <NAME>";

/// Given `sweep` or `reap` with no workers named, then the error asks for any of the three ways
/// (not `--namespace` alone), exit 2, and the usage line (in the error and in `--help`) shows
/// the three.
#[test]
fn a_fleet_command_with_no_target_asks_for_addresses_namespace_or_dns_name() {
    for args in [&["reap", "--idle-over", "5m"][..], &["sweep"][..]] {
        let output = woolctl(args);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {text}");
        assert!(stdout(&output).is_empty(), "{args:?}");
        assert!(
            text.contains("give addresses, --namespace or --dns-name"),
            "{args:?}: {text}"
        );
        assert!(!text.contains("required arguments"), "{args:?}: {text}");
        let usage = text
            .lines()
            .find(|line| line.starts_with("Usage:"))
            .unwrap_or_else(|| panic!("{args:?}: a usage line: {text}"));
        assert!(usage.contains(TARGETS_USAGE), "{args:?}: {usage}");
        let help = stdout(&woolctl(&[args[0], "--help"]));
        assert!(help.contains(TARGETS_USAGE), "{} --help: {help}", args[0]);
    }
}

/// Given a negative duration (`--idle-over -5s`, and the other duration flags), then woolctl
/// refuses it by name as negative, exit 2, rather than reading it as a flag and suggesting
/// `-- -5` (which would make it an address).
#[test]
fn a_negative_duration_is_refused_by_name() {
    for (args, flag) in [
        (
            &["reap", "--idle-over", "-5s", "127.0.0.1:1"][..],
            "--idle-over",
        ),
        (
            &[
                "reap",
                "--idle-over",
                "1s",
                "--interval",
                "-1m",
                "127.0.0.1:1",
            ][..],
            "--interval",
        ),
        (
            &["idle", "--rpc-timeout", "-5s", "127.0.0.1:1"][..],
            "--rpc-timeout",
        ),
        (
            &["idle", "--connect-timeout", "-2", "127.0.0.1:1"][..],
            "--connect-timeout",
        ),
    ] {
        let output = woolctl(args);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {text}");
        assert!(stdout(&output).is_empty(), "{args:?}");
        assert!(text.contains(flag), "{args:?} names {flag}: {text}");
        assert!(text.contains("negative"), "{args:?} says negative: {text}");
        assert!(!text.contains("-- -"), "{args:?}: no '-- -5' tip: {text}");
    }
}

/// When a timeout flag is given zero, then it is refused by name, as a usage error (exit 2),
/// in the words the duration parser uses for its other refusals.
#[test]
fn a_zero_timeout_is_refused_by_name() {
    for flag in ["--connect-timeout", "--rpc-timeout"] {
        let output = woolctl(&["idle", flag, "0", "127.0.0.1:1"]);
        let text = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{flag}: {text}");
        assert!(
            text.contains(&format!("invalid value '0' for '{flag}")),
            "names {flag}: {text}"
        );
        assert!(
            text.contains("is zero: a timeout is more than 0"),
            "{flag}: {text}"
        );
    }
}

/// Given live workers, when woolctl prints idle seconds as JSON (`idle`, `sweep`, `reap`), then
/// each number has at most six decimals (microseconds), as the table rounds to three.
#[test]
fn json_idle_seconds_are_rounded_to_the_microsecond() {
    let workers = [WorkerProcess::plaintext(), WorkerProcess::plaintext()];
    let (a, b) = (workers[0].address.as_str(), workers[1].address.as_str());
    let mut seen = 0;
    for args in [
        &["idle", "--output", "json", a, b][..],
        &["sweep", "--output", "json", a, b][..],
        &[
            "reap",
            "--dry-run",
            "--idle-over",
            "1h",
            "--output",
            "json",
            a,
            b,
        ][..],
    ] {
        let output = woolctl(args);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        for line in stdout(&output).lines() {
            let raw = line
                .split("\"idle_seconds\":")
                .nth(1)
                .unwrap_or_else(|| panic!("{args:?}: idle_seconds in {line}"));
            let number: String = raw
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == 'e' || *c == '-')
                .collect();
            let decimals = number.split_once('.').map_or(0, |(_, d)| d.len());
            assert!(
                !number.contains('e') && decimals <= 6,
                "{args:?}: {number} in {line}"
            );
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(value["idle_seconds"].as_f64().unwrap() >= 0.0, "{line}");
            seen += 1;
        }
    }
    assert_eq!(seen, 6, "a JSON line per worker per command");
}

/// Given a worker that does not answer (frozen), when `woolctl idle` polls it with a 1 s
/// `--rpc-timeout`, then the row speaks of that timeout ("no answer within the timeout of
/// 1.000 s"), not of a sweep the operator never asked for; a poll never sent (one at a time,
/// the first took the whole deadline) says the timeout passed before it was sent.
#[test]
fn the_timeout_message_of_idle_speaks_of_the_timeout_given() {
    let frozen = WorkerProcess::plaintext();
    let other = WorkerProcess::plaintext();
    frozen.freeze();
    let output = woolctl(&[
        "idle",
        "--rpc-timeout",
        "1s",
        "--connect-timeout",
        "10s",
        "--max-in-flight",
        "1",
        &frozen.address,
        &other.address,
    ]);
    frozen.thaw();
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}{}", stderr(&output));
    let rows: Vec<&str> = text.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(
        rows[0].contains("deadline exceeded: no answer within the timeout of 1.000 s"),
        "{text}"
    );
    assert!(
        rows[1].contains("the timeout of 1.000 s passed before this poll was sent"),
        "{text}"
    );
    assert!(!text.contains("sweep"), "{text}");
}

/// Given a reap whose rows have no DETAIL (nothing failed), when printed as a table, then no
/// line ends in blanks.
#[test]
fn reap_table_rows_have_no_trailing_blanks() {
    let workers = [WorkerProcess::plaintext(), WorkerProcess::plaintext()];
    let output = woolctl(&[
        "reap",
        "--dry-run",
        "--idle-over",
        "1h",
        &workers[0].address,
        &workers[1].address,
    ]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}{}", stderr(&output));
    assert_eq!(text.lines().count(), 3, "a header and two rows: {text}");
    for line in text.lines() {
        assert_eq!(line, line.trim_end(), "trailing blanks: {line:?}");
    }
    assert!(text.contains(" keep "), "{text}");
}

/// Given any command's `--help`, then its own options come first and the flags every command
/// takes are listed apart, under "Global options".
#[test]
fn each_commands_help_lists_the_global_flags_apart() {
    for (command, own) in [
        ("idle", None),
        ("stop", Some("--grace")),
        ("discover", Some("--watch")),
        ("sweep", Some("--namespace")),
        ("reap", Some("--idle-over")),
    ] {
        let output = woolctl(&[command, "--help"]);
        assert_eq!(output.status.code(), Some(0));
        let help = stdout(&output);
        // A flag is listed where a line begins with it (a description may mention any flag).
        let lists = |section: &str, flag: &str| {
            section
                .lines()
                .any(|line| line.trim_start().starts_with(&format!("{flag} ")))
        };
        let (before, globals) = help
            .split_once("Global options:")
            .unwrap_or_else(|| panic!("{command} --help has a Global options heading: {help}"));
        for global in [
            "--output",
            "--rpc-timeout",
            "--connect-timeout",
            "--tls-ca-cert",
        ] {
            assert!(lists(globals, global), "{command}: {global} global: {help}");
            assert!(
                !lists(before, global),
                "{command}: {global} not own: {help}"
            );
        }
        if let Some(own) = own {
            assert!(lists(before, own), "{command}: {own} its own: {help}");
            assert!(!lists(globals, own), "{command}: {own} not global: {help}");
        }
    }
}
