//! Every compile line in the docs is run: the lines a reader copies to build against libwool.
//!
//! The rule (also in docs/testing.md, "Compile lines in the docs"):
//!
//! - **Where**: fenced code blocks (```` ``` ```` or `~~~`) of `README.md`, `docs/*.md` and
//!   `bindings/*/README.md`.
//! - **What is a compile line**: in a block, a logical line (a line ending in `\` continues on
//!   the next) whose command, after an optional `$ ` prompt, `cd DIR &&` and `NAME=value`
//!   assignments, begins with `cc`, `gcc`, `clang`, `c++`, `g++`, `cmake`, `go build` or
//!   `go run`; and every line of a block whose language is `cmake`.
//! - **The mark**: a block holding compile lines is preceded (the last non-blank line before its
//!   opening fence) by one of
//!   - `<!-- compile-lines: checkout -->`: this test runs them, in a checkout; or
//!   - `<!-- compile-lines: elsewhere: PATH (why) -->`: another test runs them (an install
//!     into a prefix, a release artifact), `PATH` being that script or test, relative to the
//!     repository (it must exist).
//!
//!   An unmarked block with compile lines fails this test, and so does a mark on a block with
//!   none (a stale mark) or a mark that is neither form.
//! - **How a checkout block is run**: its compile lines only (other lines, such as the
//!   placeholder `LIBWOOL=/path/to/libwool`, are not run), one after the other with `bash -e`,
//!   in an empty directory holding `app.c`, the README's C example (the ```` ```c ```` block of
//!   `README.md` with a `main`), with `LIBWOOL` set to this checkout as built (its `include/`
//!   and the `target/<profile>` holding `libwool.so`). The program they make, `app`, is then
//!   started from another directory, with no `LD_LIBRARY_PATH`, against a live worker (exit 0,
//!   its idle seconds printed) and with a target that does not parse (exit 1, the failure
//!   printed): a missing run path or a silent failure fails the test.
//!
//! Besides: no line of those files may give an in-checkout link (`-L…target/…`) without a run
//! path (`rpath`) or `LD_LIBRARY_PATH` on the same line.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::WorkerProcess;

/// The mark's prefix and suffix.
const MARK_OPEN: &str = "<!-- compile-lines:";
const MARK_CLOSE: &str = "-->";

/// How a marked block's compile lines are covered.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mark {
    /// Run by this test.
    Checkout,
    /// Run by the script or test at this path.
    Elsewhere(String),
}

/// One fenced block of a doc.
#[derive(Debug)]
struct Block {
    /// `file:line` of its opening fence.
    place: String,
    language: String,
    /// Its logical lines (continuations joined).
    lines: Vec<String>,
    /// The mark before it: `None` when there is none, `Some(Err(text))` when it is malformed.
    mark: Option<Result<Mark, String>>,
}

impl Block {
    /// The block's compile lines (see the module's rule).
    fn compile_lines(&self) -> Vec<&str> {
        if self.language == "cmake" {
            return self.lines.iter().map(String::as_str).collect();
        }
        self.lines
            .iter()
            .map(String::as_str)
            .filter(|line| is_compile_line(line))
            .collect()
    }
}

/// Whether a shell line is a compile line: its command, after a `$ ` prompt, `cd DIR &&` and
/// `NAME=value` assignments, begins with a compiler, `cmake`, `go build` or `go run`.
fn is_compile_line(line: &str) -> bool {
    let mut words: Vec<&str> = line
        .trim()
        .trim_start_matches("$ ")
        .split_whitespace()
        .collect();
    loop {
        match words.as_slice() {
            ["cd", _, "&&", ..] => {
                words.drain(..3);
            }
            [word, ..] if is_assignment(word) => {
                words.remove(0);
            }
            _ => break,
        }
    }
    matches!(
        words.as_slice(),
        ["cc" | "gcc" | "clang" | "c++" | "g++" | "cmake", ..] | ["go", "build" | "run", ..]
    )
}

/// `NAME=value`, NAME a shell variable name.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit())
    })
}

/// Reads a mark line: `Some` when the line is one (well-formed or not).
fn parse_mark(line: &str) -> Option<Result<Mark, String>> {
    let inner = line.trim().strip_prefix(MARK_OPEN)?;
    let Some(inner) = inner.strip_suffix(MARK_CLOSE) else {
        return Some(Err(line.to_string()));
    };
    let inner = inner.trim();
    if inner == "checkout" {
        return Some(Ok(Mark::Checkout));
    }
    match inner.strip_prefix("elsewhere:").map(str::trim) {
        Some(rest) if !rest.is_empty() => {
            let path = rest.split_whitespace().next().unwrap_or_default();
            Some(Ok(Mark::Elsewhere(path.to_string())))
        }
        _ => Some(Err(line.to_string())),
    }
}

/// The fenced blocks of `file` (`name` in messages).
fn blocks(file: &Path, name: &str) -> Vec<Block> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut blocks = Vec::new();
    let mut last_non_blank = "";
    let mut open: Option<(String, Block)> = None; // (the fence, the block)
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match &mut open {
            None => {
                let fence: String = trimmed
                    .chars()
                    .take_while(|c| *c == '`' || *c == '~')
                    .collect();
                if fence.len() >= 3 && fence.chars().all(|c| c == fence.chars().next().unwrap()) {
                    let language = trimmed[fence.len()..].trim().to_lowercase();
                    let mark = parse_mark(last_non_blank);
                    open = Some((
                        fence,
                        Block {
                            place: format!("{name}:{}", index + 1),
                            language,
                            lines: Vec::new(),
                            mark,
                        },
                    ));
                } else if !trimmed.is_empty() {
                    last_non_blank = line;
                }
            }
            Some((fence, block)) => {
                if trimmed.starts_with(fence.as_str()) && trimmed.trim_end() == fence.as_str() {
                    blocks.push(open.take().unwrap().1);
                    last_non_blank = "";
                    continue;
                }
                match block.lines.last_mut() {
                    Some(previous) if previous.ends_with('\\') => {
                        previous.pop();
                        previous.push(' ');
                        previous.push_str(line.trim());
                    }
                    _ => block.lines.push(line.to_string()),
                }
            }
        }
    }
    assert!(open.is_none(), "{name}: a fence is never closed");
    blocks
}

/// The docs the rule covers: `README.md`, `docs/*.md`, `bindings/*/README.md`, with their
/// names relative to the repository.
fn docs() -> Vec<(PathBuf, String)> {
    let root = common::repo();
    let mut files = vec![root.join("README.md")];
    let mut more = |dir: PathBuf, pick: &dyn Fn(&Path) -> Option<PathBuf>| {
        let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|entry| pick(&entry.unwrap().path()))
            .collect();
        found.sort();
        files.extend(found);
    };
    more(root.join("docs"), &|path| {
        (path.extension().is_some_and(|e| e == "md")).then(|| path.to_path_buf())
    });
    more(root.join("bindings"), &|path| {
        let readme = path.join("README.md");
        readme.is_file().then_some(readme)
    });
    files
        .into_iter()
        .map(|path| {
            let name = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (path, name)
        })
        .collect()
}

/// Given the docs, then every block with compile lines is marked (checkout, or elsewhere with
/// a path that exists), every mark is on a block with compile lines, and no line gives an
/// in-checkout link without a run path.
#[test]
fn every_compile_line_in_the_docs_is_marked_with_what_runs_it() {
    let root = common::repo();
    let mut problems = Vec::new();
    let mut checkout = 0;
    for (path, name) in docs() {
        for block in blocks(&path, &name) {
            let compile = block.compile_lines();
            match (&block.mark, compile.is_empty()) {
                (None, false) => problems.push(format!(
                    "{}: compile lines without a mark ({MARK_OPEN} checkout {MARK_CLOSE} or \
                     {MARK_OPEN} elsewhere: PATH {MARK_CLOSE}): {compile:?}",
                    block.place
                )),
                (Some(Err(text)), _) => {
                    problems.push(format!("{}: a malformed mark: {text}", block.place))
                }
                (Some(Ok(_)), true) => problems.push(format!(
                    "{}: a mark on a block with no compile line",
                    block.place
                )),
                (Some(Ok(Mark::Elsewhere(script))), false) if !root.join(script).exists() => {
                    problems.push(format!(
                        "{}: covered by {script}, which does not exist",
                        block.place
                    ))
                }
                (Some(Ok(Mark::Checkout)), false) => checkout += 1,
                _ => {}
            }
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (index, line) in text.lines().enumerate() {
            let links_in_checkout = line.contains("-Ltarget/")
                || (line.contains("-L") && line.contains("/target/") && line.contains("-lwool"));
            if links_in_checkout && !line.contains("rpath") && !line.contains("LD_LIBRARY_PATH") {
                problems.push(format!(
                    "{name}:{}: an in-checkout link without a run path: {line}",
                    index + 1
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checkout >= 2,
        "the README's and install.md's checkout lines are found"
    );
}

/// The README's C example: the ```c block of README.md with a `main`.
fn readme_c_program() -> String {
    let readme = common::repo().join("README.md");
    let programs: Vec<String> = blocks(&readme, "README.md")
        .into_iter()
        .filter(|block| block.language == "c")
        .map(|block| block.lines.join("\n"))
        .filter(|text| text.contains("int main("))
        .collect();
    assert_eq!(programs.len(), 1, "one whole C program in the README");
    programs.into_iter().next().unwrap()
}

/// A checkout as the docs' lines see it: `include/` and `target/debug/` (the profile
/// directory holding the built libwool.so, wherever cargo put it).
fn checkout_view(dir: &Path) -> PathBuf {
    let view = dir.join("libwool");
    std::fs::create_dir_all(view.join("target")).unwrap();
    std::os::unix::fs::symlink(common::repo().join("include"), view.join("include")).unwrap();
    std::os::unix::fs::symlink(common::library_dir(), view.join("target/debug")).unwrap();
    view
}

/// Given each block marked `checkout`, when its compile lines are run as the rule says, then
/// they build `app` from the README's C example, and `app`, started elsewhere with no
/// LD_LIBRARY_PATH, polls a live worker (exit 0, its idle seconds) and says why a target that
/// does not parse failed (exit 1, the status and message on stderr).
#[test]
fn the_checkout_compile_lines_build_a_program_that_runs() {
    let program = readme_c_program();
    let worker = WorkerProcess::plaintext();
    let mut ran = 0;
    for (path, name) in docs() {
        for block in blocks(&path, &name) {
            if block.mark != Some(Ok(Mark::Checkout)) {
                continue;
            }
            let scratch = tempfile::tempdir().unwrap();
            let view = checkout_view(scratch.path());
            let build = scratch.path().join("build");
            std::fs::create_dir(&build).unwrap();
            std::fs::write(build.join("app.c"), &program).unwrap();
            for line in block.compile_lines() {
                let output = Command::new("bash")
                    .args(["-ec", line])
                    .current_dir(&build)
                    .env("LIBWOOL", &view)
                    .stdin(Stdio::null())
                    .output()
                    .expect("bash runs");
                assert!(
                    output.status.success(),
                    "{}: `{line}` failed:\n{}",
                    block.place,
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            let app = build.join("app");
            assert!(app.is_file(), "{}: the lines make `app`", block.place);
            let run = |target: &str| {
                Command::new(&app)
                    .arg(target)
                    .current_dir(scratch.path())
                    .env_remove("LD_LIBRARY_PATH")
                    .stdin(Stdio::null())
                    .output()
                    .unwrap()
            };
            let polled = run(&worker.address);
            let out = String::from_utf8_lossy(&polled.stdout);
            assert_eq!(
                polled.status.code(),
                Some(0),
                "{}: app against a live worker (127 = libwool.so not found): {}{out}",
                block.place,
                String::from_utf8_lossy(&polled.stderr)
            );
            assert!(out.starts_with("idle "), "{}: {out}", block.place);
            let refused = run("not a target");
            let err = String::from_utf8_lossy(&refused.stderr);
            assert_eq!(refused.status.code(), Some(1), "{}: {err}", block.place);
            assert!(
                err.contains("WOOL_STATUS_INVALID_ARGUMENT") || err.contains("invalid"),
                "{}: the connect's failure is printed: {err:?}",
                block.place
            );
            ran += 1;
        }
    }
    assert!(
        ran >= 2,
        "the README's and install.md's checkout blocks ran"
    );
}

#[test]
fn compile_lines_are_told_from_other_lines() {
    for line in [
        "cc app.c -o app",
        "$ gcc -O2 x.c",
        "CC=clang cc app.c $(pkg-config --cflags --libs wool)",
        "LD_LIBRARY_PATH=$PREFIX/lib go run .",
        "cd examples/go && PKG_CONFIG_PATH=/p go run ./cmd/poll-retire ADDR",
        "go build -tags woolstatic .",
        "cmake -S . -B build",
    ] {
        assert!(is_compile_line(line), "{line}");
    }
    for line in [
        "LIBWOOL=/path/to/libwool     # the checkout",
        "cargo build -p libwool-capi",
        "go mod tidy",
        "pip install bindings/python",
        "# cc app.c",
        "export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig",
    ] {
        assert!(!is_compile_line(line), "{line}");
    }
    assert_eq!(
        parse_mark("<!-- compile-lines: elsewhere: scripts/go-test.sh (why) -->"),
        Some(Ok(Mark::Elsewhere("scripts/go-test.sh".into())))
    );
    assert_eq!(
        parse_mark("<!-- compile-lines: checkout -->"),
        Some(Ok(Mark::Checkout))
    );
    assert!(matches!(
        parse_mark("<!-- compile-lines: maybe -->"),
        Some(Err(_))
    ));
    assert_eq!(parse_mark("<!-- something else -->"), None);
}
